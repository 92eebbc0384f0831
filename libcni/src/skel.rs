//! The plugin skeleton: environment + stdin → verb, with the spec's validation, version gating
//! and output rules.

use crate::error::{codes, to_indented_json, CniError};
use crate::result::CniResult;
use crate::{gojson, validate, version};
use serde_json::{Map, Value};
use std::io::{Read, Write};

/// Largest network configuration accepted on stdin.
pub const MAX_STDIN_BYTES: u64 = 4 * 1024 * 1024;

/// The verbs a plugin implements (VERSION is answered by the skeleton itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
}

impl Command {
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
        }
    }
}

/// Everything a plugin is called with.
#[derive(Debug, Clone)]
pub struct CmdArgs {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// Raw CNI_ARGS.
    pub args: String,
    pub path: Vec<String>,
    pub stdin: Vec<u8>,
    /// The parsed stdin object.
    pub config: Map<String, Value>,
    /// The config's cniVersion ("0.1.0" when absent), the version results are printed in.
    pub cni_version: String,
    pub network_name: String,
}

impl CmdArgs {
    /// prevResult of any version, converted to the current shape.
    pub fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        match gojson::get(&self.config, "prevResult") {
            None => Ok(None),
            Some(v) => CniResult::from_value(v).map(Some).map_err(|e| {
                CniError::new(
                    e.code,
                    format!("could not parse prevResult: {}", e.msg),
                    e.details,
                )
            }),
        }
    }

    /// The (containerID, ifname) pairs of `cni.dev/valid-attachments` (GC), falling back to the
    /// legacy `cni.dev/attachments` key.
    pub fn valid_attachments(&self) -> Result<Vec<(String, String)>, CniError> {
        let list = match gojson::get(&self.config, "cni.dev/valid-attachments")
            .or_else(|| gojson::get(&self.config, "cni.dev/attachments"))
        {
            None => return Ok(Vec::new()),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(CniError::decode("cni.dev/valid-attachments must be a list")),
        };
        list.iter()
            .map(|a| {
                let get = |k: &str| {
                    gojson::get_in(a, k)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                match (get("containerID"), get("ifname")) {
                    (Some(c), Some(i)) => Ok((c, i)),
                    _ => Err(CniError::decode(format!(
                        "invalid entry in cni.dev/valid-attachments: {a}; expected {{\"containerID\", \"ifname\"}}"
                    ))),
                }
            })
            .collect()
    }

    /// CNI_ARGS as pairs.
    pub fn cni_args(&self) -> Result<Vec<(String, String)>, CniError> {
        crate::args::parse_cni_args(&self.args)
    }

    /// `runtimeConfig.<key>` if present and not null (keys matched as Go does).
    pub fn runtime_config(&self, key: &str) -> Option<&Value> {
        gojson::get(&self.config, "runtimeConfig").and_then(|r| gojson::get_in(r, key))
    }

    /// The whole request config decoded into `T` with Go's rules ([`gojson`]).
    pub fn decode_config<T: serde::de::DeserializeOwned>(&self) -> Result<T, gojson::Error> {
        gojson::from_map(&self.config)
    }
}

/// A CNI plugin's verbs.
pub trait Plugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError>;
    fn del(&self, args: &CmdArgs) -> Result<(), CniError>;
    fn check(&self, args: &CmdArgs) -> Result<(), CniError>;
    fn gc(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
    fn status(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
}

/// What the skeleton decided to do; separated from I/O so it can be tested.
#[derive(Debug)]
pub enum Outcome {
    /// Print the about text on stderr, exit 0.
    About,
    /// Print this JSON on stdout, exit 0.
    Print(String),
    /// Nothing to print, exit 0.
    Done,
    /// Print the error JSON on stdout, exit 1.
    Fail(String),
}

/// The environment, abstracted for tests.
pub trait Env {
    fn var(&self, name: &str) -> String;
    fn is_set(&self, name: &str) -> bool;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> String {
        std::env::var(name).unwrap_or_default()
    }
    fn is_set(&self, name: &str) -> bool {
        std::env::var_os(name).is_some()
    }
}

const ENV_VARS: &[(&str, &[&str])] = &[
    ("CNI_COMMAND", &[]),
    ("CNI_CONTAINERID", &["ADD", "CHECK", "DEL"]),
    ("CNI_NETNS", &["ADD", "CHECK"]),
    ("CNI_IFNAME", &["ADD", "CHECK", "DEL"]),
    ("CNI_ARGS", &[]),
    ("CNI_PATH", &["ADD", "CHECK", "DEL", "GC", "STATUS"]),
];

fn fail(e: &CniError, version: &str) -> Outcome {
    Outcome::Fail(to_indented_json(&e.to_value(version)))
}

/// Reads stdin up to [`MAX_STDIN_BYTES`].
pub fn read_bounded(r: &mut impl Read) -> Result<Vec<u8>, CniError> {
    let mut buf = Vec::new();
    r.take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| CniError::io(format!("error reading from stdin: {e}")))?;
    if buf.len() as u64 > MAX_STDIN_BYTES {
        return Err(CniError::io(format!(
            "network configuration on stdin exceeds the limit of {} bytes",
            MAX_STDIN_BYTES
        )));
    }
    Ok(buf)
}

fn parse_config(stdin: &[u8]) -> Result<(Map<String, Value>, String, String), CniError> {
    let v: Value = gojson::parse(stdin)
        .map_err(|e| CniError::decode(format!("error unmarshall network config: {e}")))?;
    let Value::Object(config) = v else {
        return Err(CniError::decode(
            "error unmarshall network config: not a JSON object",
        ));
    };
    let name = match gojson::get(&config, "name") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(CniError::decode(
                "error unmarshall network config: name is not a string",
            ))
        }
    };
    validate::network_name(&name)?;
    let cni_version = match gojson::get(&config, "cniVersion") {
        None => "0.1.0".to_string(),
        Some(Value::String(s)) if s.is_empty() => "0.1.0".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(CniError::decode(
                "decoding version from network config: cniVersion is not a string",
            ))
        }
    };
    Ok((config, name, cni_version))
}

fn gate(cmd: Command, cfg_version: &str, supported: &[&str]) -> Result<(), CniError> {
    if !supported.contains(&cfg_version) {
        return Err(CniError::new(
            codes::INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            format!(
                "config is {cfg_version:?}, plugin supports {}",
                crate::error::go_quoted_list(supported)
            ),
        ));
    }
    let min = match cmd {
        Command::Check => "0.4.0",
        Command::Gc | Command::Status => "1.1.0",
        Command::Add | Command::Del => return Ok(()),
    };
    if !version::at_least(cfg_version, min) {
        return Err(CniError::incompatible_version(format!(
            "config version does not allow {}",
            cmd.as_str()
        )));
    }
    Ok(())
}

/// Device and inode of a namespace file, to compare namespaces.
fn ns_identity(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// Device and inode of the calling thread's netns, asked of a throw-away socket (born in
/// that netns; `SIOCGSKNS` gives a descriptor of it): stat'ing `/proc/self/ns/net` would make
/// a fresh process instantiate its `/proc/<pid>` dentries, which its exit then tears down.
/// The ioctl needs CAP_NET_ADMIN (plugins run as root); without it the path is used.
///
/// Asked once per thread: a plugin dispatches from its main thread, which is back in its own
/// netns whenever it does (an IPAM plugin linked into its caller dispatches again).
fn own_netns_identity() -> Option<(u64, u64)> {
    thread_local! {
        static OWN: std::cell::OnceCell<Option<(u64, u64)>> = const { std::cell::OnceCell::new() };
    }
    OWN.with(|own| *own.get_or_init(ask_own_netns_identity))
}

fn ask_own_netns_identity() -> Option<(u64, u64)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    const SIOCGSKNS: libc::c_ulong = 0x894c;
    // SAFETY: plain socket creation; on success the descriptor is owned by `sock`.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw >= 0 {
        // SAFETY: `raw` was just created and is ours.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: SIOCGSKNS takes no argument; it returns a new O_CLOEXEC descriptor.
        let ns = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
        if ns >= 0 {
            // SAFETY: the ioctl's result is a fresh descriptor nobody else owns.
            let ns = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(ns) });
            if let Ok(m) = ns.metadata() {
                return Some((m.dev(), m.ino()));
            }
        }
    }
    ns_identity("/proc/self/ns/net")
}

/// Whether `CNI_NETNS_OVERRIDE` lets a plugin act on its own network namespace: what the
/// reference's skel accepts (`1`, or `true` in any case: `TRUE`, `True`, ...) and what Go's
/// `strconv.ParseBool` reads as true (adds `t`, `T`).
pub fn netns_override_set(value: &str) -> bool {
    value == "1" || value == "t" || value == "T" || value.eq_ignore_ascii_case("true")
}

/// Refuses to act on the plugin's own network namespace (it would rewire the host), with the
/// reference's text and code. The reference checks after the plugin did its work; we check
/// before, so nothing is changed.
fn check_not_own_netns(env: &impl Env, netns: &str) -> Result<(), CniError> {
    if netns.is_empty() || netns_override_set(&env.var("CNI_NETNS_OVERRIDE")) {
        return Ok(());
    }
    match (ns_identity(netns), own_netns_identity()) {
        (Some(a), Some(b)) if a == b => Err(CniError::invalid_netns(
            "plugin's netns and netns from CNI_NETNS should not be the same",
        )),
        _ => Ok(()),
    }
}

/// Runs the skeleton logic with the given environment and stdin and returns what to print.
pub fn dispatch(plugin: &impl Plugin, env: &impl Env, stdin: &mut impl Read) -> Outcome {
    dispatch_versions(plugin, env, stdin, version::SUPPORTED_VERSIONS)
}

/// [`dispatch`] for a plugin that supports only `supported` (a subset of the spec versions).
pub fn dispatch_versions(
    plugin: &impl Plugin,
    env: &impl Env,
    stdin: &mut impl Read,
    supported: &[&str],
) -> Outcome {
    let cmd_name = env.var("CNI_COMMAND");
    let missing: Vec<&str> = ENV_VARS
        .iter()
        .filter(|(name, req)| {
            (*name == "CNI_COMMAND" || req.contains(&cmd_name.as_str())) && env.var(name).is_empty()
        })
        .map(|(name, _)| *name)
        .collect();
    if !missing.is_empty() {
        if cmd_name.is_empty() {
            return Outcome::About;
        }
        let e = CniError::invalid_env(format!(
            "required env variables [{}] missing",
            missing.join(",")
        ));
        return fail(&e, "");
    }
    if cmd_name == "VERSION" {
        let info =
            serde_json::json!({"cniVersion": version::CURRENT, "supportedVersions": supported});
        return Outcome::Print(info.to_string() + "\n");
    }
    let stdin = match read_bounded(stdin) {
        Ok(b) => b,
        Err(e) => return fail(&e, ""),
    };
    let (config, network_name, cni_version) = match parse_config(&stdin) {
        Ok(t) => t,
        Err(e) => return fail(&e, ""),
    };
    let command = match cmd_name.as_str() {
        "ADD" => Command::Add,
        "DEL" => Command::Del,
        "CHECK" => Command::Check,
        "GC" => Command::Gc,
        "STATUS" => Command::Status,
        other => {
            return fail(
                &CniError::invalid_env(format!("unknown CNI_COMMAND: {other}")),
                "",
            );
        }
    };
    let container_id = env.var("CNI_CONTAINERID");
    let ifname = env.var("CNI_IFNAME");
    let netns = env.var("CNI_NETNS");
    if matches!(command, Command::Add | Command::Check | Command::Del) {
        if let Err(e) =
            validate::container_id(&container_id).and_then(|_| validate::interface_name(&ifname))
        {
            return fail(&e, "");
        }
    }
    // Errors are reported in the request's version only when we speak it.
    let err_version = if supported.contains(&cni_version.as_str()) {
        cni_version.as_str()
    } else {
        ""
    };
    if let Err(e) = gate(command, &cni_version, supported) {
        return fail(&e, err_version);
    }
    if matches!(command, Command::Add | Command::Check | Command::Del) {
        if let Err(e) = check_not_own_netns(env, &netns) {
            return fail(&e, err_version);
        }
    }
    let args = CmdArgs {
        command,
        container_id,
        netns,
        ifname,
        args: env.var("CNI_ARGS"),
        path: env
            .var("CNI_PATH")
            .split(':')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
        stdin,
        config,
        cni_version: cni_version.clone(),
        network_name,
    };
    let outcome = match command {
        Command::Add => plugin
            .add(&args)
            .and_then(|r| r.to_value(&cni_version))
            .map(|v| Outcome::Print(to_indented_json(&v))),
        Command::Del => plugin.del(&args).map(|_| Outcome::Done),
        Command::Check => plugin.check(&args).map(|_| Outcome::Done),
        Command::Gc => plugin.gc(&args).map(|_| Outcome::Done),
        Command::Status => plugin.status(&args).map(|_| Outcome::Done),
    };
    outcome.unwrap_or_else(|e| fail(&e, err_version))
}

/// The suite and its version, as every binary reports it (`ferrocni v0.1.0`): the workspace's
/// version, kept in one place.
pub const SUITE_VERSION: &str = concat!("ferrocni v", env!("CARGO_PKG_VERSION"));

/// The about text printed without CNI_COMMAND: the plugin's own words with the suite and its
/// version, as upstream's `CNI bridge plugin v1.9.1`. A plugin's `(ferrocni)` marker becomes
/// `ferrocni v<version>`; a text without it gets the version appended to its first line.
pub fn about_text(about: &str) -> String {
    if about.contains("(ferrocni)") {
        return about.replacen("(ferrocni)", SUITE_VERSION, 1);
    }
    match about.split_once('\n') {
        Some((first, rest)) => format!("{first} {SUITE_VERSION}\n{rest}"),
        None => format!("{about} {SUITE_VERSION}"),
    }
}

/// Writes the whole answer to stdout in one `write` where the pipe takes it: std's stdout is
/// line-buffered, which would split an indented result at its last newline and wake the
/// runtime twice.
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    // SAFETY: fd 1 is the process's stdout; ManuallyDrop keeps it open after the write.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    out.write_all(bytes)
}

/// The plugin's `main`: dispatches on the real environment and stdin, prints, exits.
pub fn run(plugin: &impl Plugin, about: &str) -> ! {
    run_versions(plugin, about, version::SUPPORTED_VERSIONS)
}

/// [`run`] for a plugin that supports only the spec versions in `supported`.
pub fn run_versions(plugin: &impl Plugin, about: &str, supported: &[&str]) -> ! {
    let outcome = dispatch_versions(plugin, &ProcessEnv, &mut std::io::stdin().lock(), supported);
    let code = match outcome {
        Outcome::About => {
            eprintln!("{}", about_text(about));
            eprintln!("CNI protocol versions supported: {}", supported.join(", "));
            0
        }
        Outcome::Print(s) => {
            // A closed stdout leaves nothing useful to do; the exit code still tells success.
            let _ = write_stdout(s.as_bytes());
            0
        }
        Outcome::Done => 0,
        Outcome::Fail(s) => {
            let _ = write_stdout(s.as_bytes());
            1
        }
    };
    std::process::exit(code)
}

#[cfg(test)]
mod tests;
