//! Running one plugin binary directly, as a runtime would exec it: the one way tests do it.
//! An [`Impl`] says which binary (ours or the reference) and the CNI_PATH its delegates are
//! found in; an [`Attachment`] says where its "host" side runs (a test's netns, or the test's
//! own when the plugin only touches the container's), for which container, netns and
//! interface, with which CNI_ARGS and environment. Each verb then runs with a config on stdin.
//!
//! ```no_run
//! use netns_tests::plugin::{Attachment, Impl};
//! use netns_tests::Netns;
//! let (host, pod) = (Netns::new("host"), Netns::new("pod"));
//! let conf = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "ptp"});
//! let a = Attachment::new(&Impl::ours("ptp"), &host, "cid", &pod);
//! let result = a.add(&conf);
//! a.del(&conf, Some(&result));
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::{our_binary, reference_plugin_dir, run_with_stdin, Netns};

/// Which implementation runs: the plugin binary and the CNI_PATH its IPAM is found in.
#[derive(Clone, Debug)]
pub struct Impl {
    /// Names it in failure messages (`ours`, `reference`).
    pub label: &'static str,
    pub bin: PathBuf,
    pub cni_path: String,
}

impl Impl {
    /// Our `plugin` with our host-local.
    pub fn ours(plugin: &str) -> Impl {
        let bin = our_binary(plugin);
        let dir = our_binary("host-local")
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Impl {
            label: "ours",
            bin,
            cni_path: dir.display().to_string(),
        }
    }

    /// The reference `plugin` with the reference host-local, if installed.
    pub fn reference(plugin: &str) -> Option<Impl> {
        let dir = reference_plugin_dir(&[plugin, "host-local"])?;
        Some(Impl {
            label: "reference",
            bin: dir.join(plugin),
            cni_path: dir.display().to_string(),
        })
    }

    /// `bin` with a CNI_PATH that points nowhere (a plugin that delegates to nothing).
    pub fn alone(label: &'static str, bin: &Path) -> Impl {
        Impl {
            label,
            bin: bin.to_path_buf(),
            cni_path: "/nonexistent".into(),
        }
    }

    /// The host-local of this CNI_PATH, run directly (to hold a lease as an ADD would).
    pub fn host_local(&self) -> Impl {
        Impl {
            label: "host-local",
            bin: Path::new(&self.cni_path).join("host-local"),
            cni_path: self.cni_path.clone(),
        }
    }
}

/// What a plugin printed and whether it exited 0.
#[derive(Debug)]
pub struct PluginOutput {
    pub success: bool,
    /// stdout parsed as JSON (`Null` when empty or not JSON).
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for PluginOutput {
    fn from(out: Output) -> PluginOutput {
        let stdout = text(&out.stdout);
        PluginOutput {
            success: out.status.success(),
            json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
            stdout,
            stderr: text(&out.stderr),
        }
    }
}

/// One attachment: who runs, where, and as which container/interface.
pub struct Attachment<'a> {
    pub imp: Impl,
    /// The netns the plugin runs in (`ip netns exec`); the test's own when `None`.
    pub host: Option<&'a Netns>,
    pub container_id: String,
    /// CNI_NETNS.
    pub netns: String,
    pub ifname: String,
    pub cni_args: String,
    /// More environment, set after the CNI variables (`None`: removed).
    pub env: Vec<(String, Option<String>)>,
    /// A command the invocation runs under (`nsenter -t PID -m --` into a private mount
    /// namespace).
    pub prefix: Vec<String>,
}

impl<'a> Attachment<'a> {
    /// `imp` run in `host` for container `container_id` in `pod`, interface `eth0`.
    pub fn new(imp: &Impl, host: &'a Netns, container_id: &str, pod: &Netns) -> Attachment<'a> {
        Attachment::at(imp, container_id, pod.path_str()).in_host(host)
    }

    /// `imp` run in the test's own netns for container `container_id` in the netns at `netns`
    /// (a path that may not exist), interface `eth0`.
    pub fn at(imp: &Impl, container_id: &str, netns: &str) -> Attachment<'a> {
        Attachment {
            imp: imp.clone(),
            host: None,
            container_id: container_id.to_string(),
            netns: netns.to_string(),
            ifname: "eth0".into(),
            cni_args: String::new(),
            env: Vec::new(),
            prefix: Vec::new(),
        }
    }

    /// Runs the plugin in `host` (`ip netns exec`).
    pub fn in_host(mut self, host: &'a Netns) -> Self {
        self.host = Some(host);
        self
    }

    /// Runs the plugin under `argv` (see [`Attachment::prefix`]).
    pub fn under(mut self, argv: &[String]) -> Self {
        self.prefix = argv.to_vec();
        self
    }

    pub fn ifname(mut self, ifname: &str) -> Self {
        self.ifname = ifname.to_string();
        self
    }

    pub fn cni_args(mut self, args: &str) -> Self {
        self.cni_args = args.to_string();
        self
    }

    /// Sets `key` (or removes it, `None`) in the plugin's environment.
    pub fn env(mut self, key: &str, value: Option<&str>) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.map(String::from)));
        self
    }

    /// The plugin's command for `command`, without its stdin.
    pub fn command(&self, command: &str) -> Command {
        let mut argv: Vec<OsString> = self.prefix.iter().map(Into::into).collect();
        if let Some(ns) = self.host {
            argv.extend(["ip", "netns", "exec", ns.name()].map(Into::into));
        }
        argv.push(self.imp.bin.clone().into_os_string());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.cni_args)
            .env("CNI_PATH", &self.imp.cni_path);
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// Runs the plugin with `command` and `conf` on stdin.
    pub fn call(&self, command: &str, conf: &Value) -> Output {
        run_with_stdin(&mut self.command(command), conf.to_string().as_bytes())
    }

    /// [`Attachment::call`], its output decoded.
    pub fn run(&self, command: &str, conf: &Value) -> PluginOutput {
        self.call(command, conf).into()
    }

    /// [`Attachment::run`] that must succeed; returns stdout as JSON (`Null` when none).
    pub fn run_ok(&self, command: &str, conf: &Value) -> Value {
        let out = self.run(command, conf);
        assert!(
            out.success,
            "{} {command} failed: {}{}",
            self.imp.label, out.stdout, out.stderr
        );
        out.json
    }

    /// ADD that must succeed; returns the result.
    pub fn add(&self, conf: &Value) -> Value {
        let out = self.call("ADD", conf);
        assert!(
            out.status.success(),
            "{} ADD failed: {}{}",
            self.imp.label,
            text(&out.stdout),
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("bad ADD output ({e}): {}", text(&out.stdout)))
    }

    /// Runs a verb that must fail; its output.
    fn failed(&self, command: &str, conf: &Value) -> Output {
        let out = self.call(command, conf);
        assert!(
            !out.status.success(),
            "{} {command} unexpectedly succeeded: {}",
            self.imp.label,
            text(&out.stdout)
        );
        out
    }

    /// A verb that must fail; returns its error JSON (or, when it printed none, its output
    /// as `{"msg": stdout, "stderr": stderr}`).
    pub fn error(&self, command: &str, conf: &Value) -> Value {
        let out = self.failed(command, conf);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| json!({"msg": text(&out.stdout), "stderr": text(&out.stderr)}))
    }

    /// A verb that must fail; returns the error JSON, which must be a spec error.
    pub fn fails(&self, command: &str, conf: &Value) -> Value {
        let out = self.failed(command, conf);
        let e: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{command} failure is not error JSON: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        });
        assert!(e["code"].is_u64() && e["msg"].is_string(), "{e}");
        e
    }

    /// A verb (DEL, CHECK, GC, STATUS) with prevResult when given, that must succeed.
    pub fn ok(&self, command: &str, conf: &Value, prev: Option<&Value>) {
        self.run_ok(command, &with_prev(conf, prev));
    }

    pub fn del(&self, conf: &Value, prev: Option<&Value>) {
        self.ok("DEL", conf, prev);
    }

    /// CHECK with prevResult; its output, success or not.
    pub fn check(&self, conf: &Value, prev: &Value) -> Output {
        self.call("CHECK", &with_prev(conf, Some(prev)))
    }

    /// CHECK with prevResult that must succeed.
    pub fn check_ok(&self, conf: &Value, prev: &Value) {
        self.ok("CHECK", conf, Some(prev));
    }
}

/// `conf` with `prevResult` set to `prev`, when given.
pub fn with_prev(conf: &Value, prev: Option<&Value>) -> Value {
    let mut c = conf.clone();
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    c
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
