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

/// Unit-test drivers over netkit's fake kernel: an in-process IPAM that shares the kernel's
/// log and failure injection, and the checks every main plugin's ADD goes through.
#[cfg(feature = "fake")]
mod fake {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    use libcni::error::CniError;
    use libcni::result::CniResult;
    use libcni::skel::CmdArgs;
    use netkit::fake::{FakeKernel, FakeState};
    use serde_json::Value;

    use crate::ipam::Ipam;

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

    /// The fake kernel's log with the random temporary link names (`veth%08x`) shown as
    /// `veth*`, so an expected order of operations can be written down.
    pub fn ops(kernel: &FakeKernel) -> Vec<String> {
        kernel
            .ops()
            .iter()
            .map(|op| without_temp_names(op))
            .collect()
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
