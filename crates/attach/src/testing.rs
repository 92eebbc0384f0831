//! Test helpers for the plugins' unit tests.

use libcni::skel::{CmdArgs, Command};
use serde_json::Value;

/// The arguments of an ADD for `config` (container "c", netns unset, ifname eth0, network
/// "net") with `cni_args` as CNI_ARGS.
pub fn cmd_args(config: Value, cni_args: &str) -> CmdArgs {
    CmdArgs {
        command: Command::Add,
        container_id: "c".into(),
        netns: String::new(),
        ifname: "eth0".into(),
        args: cni_args.into(),
        path: Vec::new(),
        stdin: config.to_string().into_bytes(),
        config: config.as_object().cloned().unwrap_or_default(),
        cni_version: "1.0.0".into(),
        network_name: "net".into(),
    }
}

/// An IPAM plugin for in-process tests, written into `dir`: it answers ADD with `result` and
/// appends `<verb> <container> <ifname>` to `<dir>/calls`. Returns the directory for CNI_PATH.
pub fn fake_ipam(dir: &std::path::Path, result: &Value) -> String {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME\" >> {log}\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then echo '{result}'; fi\n",
        log = dir.join("calls").display(),
    );
    let path = dir.join("fake-ipam");
    std::fs::write(&path, script).expect("write the fake IPAM plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the fake IPAM plugin executable");
    dir.display().to_string()
}

/// The calls the fake IPAM plugin in `dir` received.
pub fn ipam_calls(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The arguments of an ADD of container "ctr1", interface "net1", in `netns`, with the fake
/// IPAM plugin of `ipam_dir` on CNI_PATH.
pub fn cmd_args_in(netns: &std::path::Path, ipam_dir: &str, config: Value) -> CmdArgs {
    CmdArgs {
        container_id: "ctr1".into(),
        netns: netns.display().to_string(),
        ifname: "net1".into(),
        path: vec![ipam_dir.to_string()],
        network_name: "n".into(),
        ..cmd_args(config, "")
    }
}

/// The arguments of an ADD of container "ctr1", interface "net1", in the netns at `netns`
/// (a path of the fake kernel, say), with nothing on CNI_PATH.
pub fn args_in(netns: &str, config: Value) -> CmdArgs {
    CmdArgs {
        container_id: "ctr1".into(),
        netns: netns.into(),
        ifname: "net1".into(),
        network_name: "n".into(),
        ..cmd_args(config, "")
    }
}

/// `args` as a CHECK (or DEL) after an ADD that returned `prev`: its config carries
/// `prevResult`.
pub fn with_prev_result(mut args: CmdArgs, prev: &libcni::result::CniResult) -> CmdArgs {
    let value = prev
        .to_value(&args.cni_version)
        .expect("the result converts to the config's version");
    args.config.insert("prevResult".into(), value);
    args.stdin = Value::Object(args.config.clone()).to_string().into_bytes();
    args
}

#[cfg(feature = "fake")]
pub use fake::*;

/// Unit-test drivers over netkit's fake kernel: an in-process IPAM and an in-memory netfilter
/// that share the kernel's log and failure injection, and the checks every main plugin's ADD goes through.
#[cfg(feature = "fake")]
mod fake {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex, MutexGuard};

    use ipnetwork::IpNetwork;
    use libcni::error::CniError;
    use libcni::result::CniResult;
    use libcni::skel::CmdArgs;
    use netkit::fake::{FakeKernel, FakeState};
    use netkit::netfilter::{self, ipmasq::Backend, iptables::Family, spoofcheck::SpoofChecker};
    use serde_json::Value;

    use crate::ipam::Ipam;
    use crate::netfilter::Netfilter;

    /// An IPAM plugin answered in-process: ADD returns `result` and takes a lease for the
    /// container's interface, DEL releases it (whether or not it is held), CHECK fails without
    /// it. Every call is recorded in the fake kernel's log (`ipam ADD <type> <container>
    /// <ifname>`) and can be made to fail like a kernel operation.
    #[derive(Clone)]
    pub struct FakeIpam {
        kernel: FakeKernel,
        result: Arc<Value>,
        leases: Arc<Mutex<BTreeSet<String>>>,
    }

    impl FakeIpam {
        pub fn new(kernel: &FakeKernel, result: Value) -> FakeIpam {
            FakeIpam {
                kernel: kernel.clone(),
                result: Arc::new(result),
                leases: Arc::default(),
            }
        }

        /// The leases held, as `<container>/<ifname>`.
        pub fn leases(&self) -> Vec<String> {
            self.lock().iter().cloned().collect()
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
            self.leases.lock().unwrap_or_else(|p| p.into_inner())
        }

        fn record(&self, args: &CmdArgs, ipam_type: &str, verb: &str) -> Result<String, CniError> {
            let key = format!("{}/{}", args.container_id, args.ifname);
            self.kernel
                .record(format!(
                    "ipam {verb} {ipam_type} {} {}",
                    args.container_id, args.ifname
                ))
                .map_err(|e| CniError::internal(e.to_string()))?;
            Ok(key)
        }
    }

    impl Ipam for FakeIpam {
        fn add(&self, args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
            let key = self.record(args, ipam_type, "ADD")?;
            let result = CniResult::from_value(&self.result)?;
            self.lock().insert(key);
            Ok(result)
        }

        fn call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
            let key = self.record(args, ipam_type, command)?;
            match command {
                "DEL" => {
                    self.lock().remove(&key);
                }
                "CHECK" if !self.lock().contains(&key) => {
                    return Err(CniError::internal(format!("no lease for {key}")));
                }
                _ => {}
            }
            Ok(())
        }
    }

    /// Netfilter in memory: the masquerade rules (one per attachment and address) and the
    /// spoof checks installed. Every call is recorded in the fake kernel's log and can be made
    /// to fail like a kernel operation:
    ///
    /// - `masquerade setup <backend> <network>/<container>/<ifname> <addr>,...`
    /// - `masquerade teardown <network>/<container>/<ifname> <families>`
    /// - `masquerade verify <network>/<container>/<ifname>`
    /// - `masquerade gc <network>`
    /// - `spoof check install|remove|list <comment>`
    ///
    /// Its default masquerade backend is nftables, so no test depends on the host's rules.
    #[derive(Clone)]
    pub struct FakeNetfilter {
        kernel: FakeKernel,
        rules: Arc<Mutex<BTreeSet<FakeRule>>>,
    }

    /// One rule of [`FakeNetfilter`], ordered for a stable listing.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum FakeRule {
        Masquerade { attachment: String, addr: IpNetwork },
        SpoofCheck { comment: String },
    }

    impl std::fmt::Display for FakeRule {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                FakeRule::Masquerade { attachment, addr } => {
                    write!(f, "masquerade {attachment} {addr}")
                }
                FakeRule::SpoofCheck { comment } => write!(f, "spoofcheck {comment}"),
            }
        }
    }

    /// How the reference names an attachment's masquerade rules: (network, container, ifname).
    fn attachment(network: &str, container_id: &str, ifname: &str) -> String {
        format!("{network}/{container_id}/{ifname}")
    }

    impl FakeNetfilter {
        pub fn new(kernel: &FakeKernel) -> FakeNetfilter {
            FakeNetfilter {
                kernel: kernel.clone(),
                rules: Arc::default(),
            }
        }

        /// The rules installed, as `masquerade <network>/<container>/<ifname> <addr>` and
        /// `spoofcheck <comment>` lines.
        pub fn rules(&self) -> Vec<String> {
            self.lock().iter().map(ToString::to_string).collect()
        }

        fn lock(&self) -> MutexGuard<'_, BTreeSet<FakeRule>> {
            self.rules.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// Records `op`; an injected failure comes back as a netfilter error naming `op`.
        fn record(&self, op: String) -> netfilter::Result<()> {
            self.kernel
                .record(op.clone())
                .map_err(|e| netfilter::Error::Invalid {
                    context: op,
                    detail: e.to_string(),
                })
        }
    }

    impl Netfilter for FakeNetfilter {
        fn default_masquerade_backend(&self, _network: &str) -> Backend {
            Backend::Nftables
        }

        fn setup_masquerade(
            &self,
            backend: Backend,
            addrs: &[IpNetwork],
            network: &str,
            ifname: &str,
            container_id: &str,
        ) -> netfilter::Result<()> {
            let key = attachment(network, container_id, ifname);
            let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            self.record(format!(
                "masquerade setup {backend:?} {key} {}",
                list.join(",")
            ))?;
            let mut rules = self.lock();
            for addr in addrs {
                rules.insert(FakeRule::Masquerade {
                    attachment: key.clone(),
                    addr: *addr,
                });
            }
            Ok(())
        }

        fn teardown_masquerade(
            &self,
            network: &str,
            ifname: &str,
            container_id: &str,
            families: &[Family],
            _sources: &[std::net::IpAddr],
        ) -> netfilter::Result<()> {
            // Rules here are the attachment's own (as nftables keeps them): the sources the
            // iptables chain needs change nothing.
            let key = attachment(network, container_id, ifname);
            self.record(format!("masquerade teardown {key} {families:?}"))?;
            self.lock().retain(|rule| match rule {
                FakeRule::Masquerade { attachment, addr } => {
                    *attachment != key || !families.contains(&Family::of(&addr.ip()))
                }
                FakeRule::SpoofCheck { .. } => true,
            });
            Ok(())
        }

        fn verify_masquerade(
            &self,
            _backend: Option<Backend>,
            addrs: &[IpNetwork],
            network: &str,
            ifname: &str,
            container_id: &str,
        ) -> netfilter::Result<()> {
            let key = attachment(network, container_id, ifname);
            self.record(format!("masquerade verify {key}"))?;
            let rules = self.lock();
            let missing = addrs.iter().any(|addr| {
                !rules.contains(&FakeRule::Masquerade {
                    attachment: key.clone(),
                    addr: *addr,
                })
            });
            if missing {
                return Err(netfilter::Error::Invalid {
                    context: format!("masquerade of {key}"),
                    detail: "no rule".into(),
                });
            }
            Ok(())
        }

        fn gc_masquerade(
            &self,
            network: &str,
            valid: &[(String, String)],
        ) -> netfilter::Result<()> {
            self.record(format!("masquerade gc {network}"))?;
            let prefix = format!("{network}/");
            self.lock().retain(|rule| match rule {
                FakeRule::Masquerade { attachment: a, .. } => {
                    !a.starts_with(&prefix)
                        || valid.iter().any(|(c, i)| *a == attachment(network, c, i))
                }
                FakeRule::SpoofCheck { .. } => true,
            });
            Ok(())
        }

        fn install_spoof_check(&self, check: &SpoofChecker) -> netfilter::Result<()> {
            let comment = check.comment();
            self.record(format!("spoof check install {comment}"))?;
            self.lock().insert(FakeRule::SpoofCheck { comment });
            Ok(())
        }

        fn remove_spoof_check(&self, check: &SpoofChecker) -> netfilter::Result<()> {
            let comment = check.comment();
            self.record(format!("spoof check remove {comment}"))?;
            self.lock().remove(&FakeRule::SpoofCheck { comment });
            Ok(())
        }

        fn spoof_check_installed(&self, check: &SpoofChecker) -> netfilter::Result<bool> {
            let comment = check.comment();
            self.record(format!("spoof check list {comment}"))?;
            Ok(self.lock().contains(&FakeRule::SpoofCheck { comment }))
        }
    }

    /// `base` with the top-level keys of `extra` set over it: a test's config with a few
    /// fields changed.
    pub fn config_with(mut base: Value, extra: Value) -> Value {
        for (k, v) in extra.as_object().into_iter().flatten() {
            base[k] = v.clone();
        }
        base
    }

    /// The host's uplink in a fake kernel: `eth0` (MTU 1500) on 192.168.1.10/24 behind a
    /// default route via 192.168.1.1. Returns its ifindex.
    pub fn setup_uplink(kernel: &FakeKernel) -> u32 {
        let eth0 = kernel.setup_link(netkit::fake::HOST, "eth0", None, 1500);
        kernel.setup_address(
            netkit::fake::HOST,
            eth0,
            IpNetwork::V4("192.168.1.10/24".parse().expect("a CIDR")),
        );
        kernel.setup_route(
            netkit::fake::HOST,
            netkit::Route::new(IpNetwork::V4("0.0.0.0/0".parse().expect("a CIDR")))
                .via("192.168.1.1".parse().expect("an address"))
                .dev(eth0),
        );
        eth0
    }

    /// The fake kernel's log with the random temporary link names (`veth%08x`) shown as
    /// `veth*`, so an expected order of operations can be written down.
    pub fn ops(kernel: &FakeKernel) -> Vec<String> {
        kernel
            .ops()
            .iter()
            .map(|op| without_temp_names(op))
            .collect()
    }

    /// [`ops`] after the first operation that starts with `prefix` (none when there is no
    /// such operation).
    pub fn ops_after(kernel: &FakeKernel, prefix: &str) -> Vec<String> {
        let log = ops(kernel);
        match log.iter().position(|op| op.starts_with(prefix)) {
            Some(at) => log[at + 1..].to_vec(),
            None => Vec::new(),
        }
    }

    fn without_temp_names(op: &str) -> String {
        let mut out = String::new();
        let mut rest = op;
        while let Some(at) = rest.find("veth") {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            let hex = rest
                .bytes()
                .take_while(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                .count();
            if hex == 8 {
                out.push('*');
                rest = &rest[8..];
            }
        }
        out.push_str(rest);
        out
    }

    /// What [`every_failure_rolls_back`] saw at one step.
    #[derive(Debug)]
    pub struct Step {
        /// The operation made to fail.
        pub op: String,
        /// The ADD's error, `None` when it carried on (the operation is best effort).
        pub error: Option<CniError>,
    }

    /// Runs `add` once on a fresh `setup()` (it must succeed), then once per operation it
    /// made, each time on a fresh setup with that operation failing. A failed ADD must leave
    /// the kernel model as it found it and hold no lease; an ADD that carries on is allowed
    /// only when `best_effort` accepts the failed operation. Returns every step.
    pub fn every_failure_rolls_back<T>(
        setup: impl Fn() -> (FakeKernel, FakeIpam),
        add: impl Fn(&FakeKernel, &FakeIpam) -> Result<T, CniError>,
        best_effort: impl Fn(&str) -> bool,
    ) -> Vec<Step> {
        let (kernel, ipam) = setup();
        if let Err(e) = add(&kernel, &ipam) {
            panic!(
                "ADD without an injected failure failed: {e}\n{:#?}",
                kernel.ops()
            );
        }
        let count = kernel.ops().len();
        let mut steps = Vec::new();
        for n in 0..count {
            let (kernel, ipam) = setup();
            let before: FakeState = kernel.state();
            kernel.fail_at(n);
            let outcome = add(&kernel, &ipam);
            let log = ops(&kernel);
            let op = log.get(n).cloned().unwrap_or_default();
            assert!(
                op.ends_with("(injected failure)"),
                "step {n}: the ADD took another path: {log:#?}"
            );
            match outcome {
                Err(error) => {
                    assert_eq!(
                        kernel.state(),
                        before,
                        "step {n} ({op}): the failed ADD left something behind: {log:#?}"
                    );
                    assert!(
                        ipam.leases().is_empty(),
                        "step {n} ({op}): the lease was not released: {log:#?}"
                    );
                    steps.push(Step {
                        op,
                        error: Some(error),
                    });
                }
                Ok(_) => {
                    assert!(
                        best_effort(&op),
                        "step {n}: ADD ignored the failure of {op}: {log:#?}"
                    );
                    steps.push(Step { op, error: None });
                }
            }
        }
        steps
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn nets(list: &[&str]) -> Vec<IpNetwork> {
            list.iter().map(|a| a.parse().unwrap()).collect()
        }

        #[test]
        fn fake_netfilter_keeps_rules_by_attachment_and_family() {
            let kernel = FakeKernel::new();
            let nf = FakeNetfilter::new(&kernel);
            let dual = nets(&["10.1.0.5/24", "fd00::5/64"]);
            nf.setup_masquerade(Backend::Iptables, &dual, "n", "eth0", "a")
                .unwrap();
            nf.setup_masquerade(Backend::Nftables, &dual[..1], "n", "eth0", "b")
                .unwrap();
            nf.verify_masquerade(None, &dual, "n", "eth0", "a").unwrap();
            let e = nf
                .verify_masquerade(None, &dual, "n", "eth0", "b")
                .unwrap_err();
            assert_eq!(e.to_string(), "masquerade of n/b/eth0: no rule");

            // Teardown takes only the families asked for, of that attachment only.
            nf.teardown_masquerade("n", "eth0", "a", &[Family::V6], &[])
                .unwrap();
            assert_eq!(
                nf.rules(),
                [
                    "masquerade n/a/eth0 10.1.0.5/24",
                    "masquerade n/b/eth0 10.1.0.5/24"
                ]
            );
            // GC keeps the valid attachments and other networks' rules.
            nf.setup_masquerade(Backend::Nftables, &dual[..1], "m", "eth0", "c")
                .unwrap();
            nf.gc_masquerade("n", &[("b".into(), "eth0".into())])
                .unwrap();
            assert_eq!(
                nf.rules(),
                [
                    "masquerade m/c/eth0 10.1.0.5/24",
                    "masquerade n/b/eth0 10.1.0.5/24"
                ]
            );
            assert_eq!(
                kernel.ops(),
                [
                    "masquerade setup Iptables n/a/eth0 10.1.0.5/24,fd00::5/64",
                    "masquerade setup Nftables n/b/eth0 10.1.0.5/24",
                    "masquerade verify n/a/eth0",
                    "masquerade verify n/b/eth0",
                    "masquerade teardown n/a/eth0 [V6]",
                    "masquerade setup Nftables m/c/eth0 10.1.0.5/24",
                    "masquerade gc n",
                ]
            );
        }

        #[test]
        fn fake_netfilter_spoof_checks_and_injected_failures() {
            let kernel = FakeKernel::new();
            let nf = FakeNetfilter::new(&kernel);
            let check = SpoofChecker::new("veth1", "02:00:00:00:00:01", "ctr-eth0");
            assert!(!nf.spoof_check_installed(&check).unwrap());
            nf.install_spoof_check(&check).unwrap();
            assert!(nf.spoof_check_installed(&check).unwrap());
            assert_eq!(nf.rules(), [format!("spoofcheck {}", check.comment())]);

            // A failed call changes nothing and names the operation.
            kernel.fail_when(|op| op.starts_with("spoof check remove"));
            let e = nf.remove_spoof_check(&check).unwrap_err();
            assert!(e.to_string().contains("spoof check remove"), "{e}");
            assert!(nf.spoof_check_installed(&check).unwrap());
            kernel.fail_when(|op| op.starts_with("masquerade setup"));
            let addrs = nets(&["10.1.0.5/24"]);
            nf.setup_masquerade(Backend::Nftables, &addrs, "n", "eth0", "a")
                .unwrap_err();
            nf.remove_spoof_check(&check).unwrap();
            assert!(nf.rules().is_empty());
            assert_eq!(nf.default_masquerade_backend("n"), Backend::Nftables);
        }

        #[test]
        fn temporary_names_are_masked() {
            assert_eq!(
                without_temp_names("host: link add veth0a1b2c3d link #2 type macvlan"),
                "host: link add veth* link #2 type macvlan"
            );
            assert_eq!(
                without_temp_names("/p: link get veth0"),
                "/p: link get veth0"
            );
        }
    }
}
