//! Finding and executing plugin binaries (Go `pkg/invoke`), for runtimes and for plugins that
//! delegate to another plugin (IPAM).
//!
//! A plugin runs with the caller's environment plus the `CNI_*` variables of the call, the
//! request config on stdin; its stdout is the result (or the error JSON when it exits non-zero),
//! its stderr is passed through to ours.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{codes, CniError};
use crate::gojson;
use crate::linked::{CallEnv, LinkedPlugin};
use crate::skel::Outcome;

/// Why finding or running a plugin failed, or its answer could not be used (the plugin's own
/// error, parsed from its stdout, is passed on as it is). The `From` below picks the codes.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// A plain error in the reference's invoke package (code 999).
    #[error("no plugin name provided")]
    NoPluginName,
    #[error("invalid plugin name: {0}")]
    InvalidPluginName(String),
    #[error("no paths provided")]
    NoPaths,
    #[error("failed to find plugin {plugin:?} in path [{}]", join_paths(.paths))]
    NotFound { plugin: String, paths: Vec<PathBuf> },
    #[error("netplugin failed with no error message: failed to execute {}: {source}", .plugin.display())]
    Exec {
        plugin: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The plugin failed and printed nothing.
    #[error("netplugin failed with no error message: {}", describe_status(.status))]
    Silent { status: ExitStatus },
    /// The plugin failed with a message on stderr only.
    #[error("netplugin failed: {stderr:?}: {}", describe_status(.status))]
    StderrOnly { stderr: String, status: ExitStatus },
    /// The plugin failed and its stdout is not an error object.
    #[error("netplugin failed but error parsing its diagnostic message {stdout:?}: {why}")]
    BadDiagnostic { stdout: String, why: String },
    #[error("decoding version info: {0}")]
    VersionJson(#[source] gojson::Error),
    /// A VERSION answer without a field it needs.
    #[error("decoding version info: missing field {0}")]
    VersionFieldMissing(&'static str),
    /// A VERSION answer whose `supportedVersions` has the wrong shape (`what` says how).
    #[error("decoding version info: supportedVersions must {0}")]
    VersionListShape(&'static str),
    #[error("failed to unmarshal raw result: {0}")]
    ResultJson(#[source] gojson::Error),
    #[error("failed to unmarshal raw result: not a JSON object")]
    ResultNotObject,
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl From<InvokeError> for CniError {
    fn from(e: InvokeError) -> CniError {
        let msg = e.to_string();
        match e {
            InvokeError::InvalidPluginName(_)
            | InvokeError::NoPaths
            | InvokeError::NotFound { .. } => CniError::invalid_config(msg),
            InvokeError::VersionJson(_)
            | InvokeError::VersionFieldMissing(_)
            | InvokeError::VersionListShape(_)
            | InvokeError::ResultJson(_)
            | InvokeError::ResultNotObject => CniError::decode(msg),
            InvokeError::NoPluginName
            | InvokeError::Exec { .. }
            | InvokeError::Silent { .. }
            | InvokeError::StderrOnly { .. }
            | InvokeError::BadDiagnostic { .. } => CniError::internal(msg),
        }
    }
}

/// How many times a plugin start failing with "text file busy" is retried (1 s apart): the
/// binary may be being replaced right now.
const TEXT_FILE_BUSY_RETRIES: u32 = 5;

/// The `CNI_*` environment of one invocation (Go `invoke.Args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecArgs {
    /// `ADD`, `DEL`, `CHECK`, `GC`, `STATUS` or `VERSION`.
    pub command: String,
    pub container_id: String,
    pub netns: String,
    /// CNI_ARGS pairs, joined as `k=v;k=v`.
    pub plugin_args: Vec<(String, String)>,
    pub ifname: String,
    /// CNI_PATH, already joined with `:`.
    pub path: String,
}

impl ExecArgs {
    /// The six `CNI_*` variables (always all of them, possibly empty, as libcni does).
    pub fn env(&self) -> Vec<(String, String)> {
        let args = self
            .plugin_args
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        vec![
            ("CNI_COMMAND".into(), self.command.clone()),
            ("CNI_CONTAINERID".into(), self.container_id.clone()),
            ("CNI_NETNS".into(), self.netns.clone()),
            ("CNI_ARGS".into(), args),
            ("CNI_IFNAME".into(), self.ifname.clone()),
            ("CNI_PATH".into(), self.path.clone()),
        ]
    }
}

/// What a plugin answers to VERSION.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub cni_version: String,
    pub supported_versions: Vec<String>,
}

/// Splits a `CNI_PATH`-style list on `:`; empty entries are dropped (they would otherwise
/// mean "the current directory").
pub fn split_path_list(list: &str) -> Vec<PathBuf> {
    list.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Finds plugin `plugin_type` in `paths` (Go `FindInPath`): the name must be non-empty and
/// hold no path separator; the first regular, executable file named so wins.
pub fn find_in_path(plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, CniError> {
    if plugin_type.is_empty() {
        return Err(InvokeError::NoPluginName.into());
    }
    if plugin_type.contains('/') || plugin_type.contains('\\') || plugin_type.contains('\0') {
        return Err(InvokeError::InvalidPluginName(plugin_type.to_string()).into());
    }
    if paths.is_empty() {
        return Err(InvokeError::NoPaths.into());
    }
    for dir in paths {
        let candidate = dir.join(plugin_type);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
        }
    }
    Err(InvokeError::NotFound {
        plugin: plugin_type.to_string(),
        paths: paths.to_vec(),
    }
    .into())
}

/// Runs `plugin` with the current environment overridden by `env`, `stdin` as its input, and
/// returns its stdout. A non-zero exit becomes the plugin's error (parsed from stdout).
pub fn exec_plugin(
    plugin: &Path,
    stdin: &[u8],
    env: &[(String, String)],
) -> Result<Vec<u8>, CniError> {
    start_plugin(plugin, stdin, env)?.finish()
}

/// A plugin started by [`start_plugin`]: its stdin is written and closed, its output is
/// collected by [`RunningPlugin::finish`].
pub struct RunningPlugin {
    plugin: PathBuf,
    state: Running,
}

enum Running {
    /// Still running, its output unread.
    Child(Child),
    /// Already finished (its input was too big to write without reading its output).
    Done(std::process::Output),
}

/// Starts `plugin` as [`exec_plugin`] does and returns without waiting for it, so that the
/// caller can work while the plugin runs, without a thread: an input that fits in an empty
/// pipe is written at once, and the output waits in the pipes until [`RunningPlugin::finish`]
/// reads it (a plugin writing more than a pipe holds just waits for that). A bigger input is
/// fed while the output is read, so the plugin has finished when this returns.
pub fn start_plugin(
    plugin: &Path,
    stdin: &[u8],
    env: &[(String, String)],
) -> Result<RunningPlugin, CniError> {
    let mut attempt = 0;
    loop {
        match start_once(plugin, stdin, env) {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < TEXT_FILE_BUSY_RETRIES =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(source) => {
                return Err(InvokeError::Exec {
                    plugin: plugin.to_path_buf(),
                    source,
                }
                .into())
            }
            Ok(state) => {
                return Ok(RunningPlugin {
                    plugin: plugin.to_path_buf(),
                    state,
                })
            }
        }
    }
}

/// [`start_plugin`], unless one of `linked` answers for `plugin` (same type, same build: see
/// [`crate::linked`]): that one then runs here and now, and its outcome is kept as the output
/// the executed binary would have given (the same stdout, exit status 0 or 1), so that
/// [`RunningPlugin::finish`] decodes both alike.
pub fn start_plugin_linked(
    linked: &[LinkedPlugin],
    plugin: &Path,
    stdin: &[u8],
    env: &[(String, String)],
) -> Result<RunningPlugin, CniError> {
    let Some(own) = linked.iter().find(|l| l.answers_for(plugin)) else {
        return start_plugin(plugin, stdin, env);
    };
    let (code, stdout) = match (own.dispatch)(&CallEnv(env), stdin) {
        Outcome::Print(s) => (0, s.into_bytes()),
        Outcome::Fail(s) => (1, s.into_bytes()),
        // The about text (the binary prints it on stderr, for a person) is not for a caller;
        // the call's CNI_COMMAND keeps it from arising anyway.
        Outcome::About | Outcome::Done => (0, Vec::new()),
    };
    use std::os::unix::process::ExitStatusExt;
    Ok(RunningPlugin {
        plugin: plugin.to_path_buf(),
        state: Running::Done(std::process::Output {
            // A wait status: the exit code sits in its second byte.
            status: ExitStatus::from_raw(code << 8),
            stdout,
            stderr: Vec::new(),
        }),
    })
}

impl RunningPlugin {
    /// Waits for the plugin and returns its stdout. A non-zero exit becomes the plugin's
    /// error (parsed from stdout).
    pub fn finish(self) -> Result<Vec<u8>, CniError> {
        let output = match self.state {
            Running::Done(output) => output,
            Running::Child(child) => collect_output(child).map_err(|source| InvokeError::Exec {
                plugin: self.plugin,
                source,
            })?,
        };
        if output.status.success() {
            pass_stderr_through(&output.stderr);
            return Ok(output.stdout);
        }
        Err(plugin_error(&output.status, &output.stdout, &output.stderr))
    }

    /// [`RunningPlugin::finish`] for a verb whose stdout is a result, as
    /// [`exec_plugin_with_result`]; `stdin` is the request the plugin was started with.
    pub fn finish_with_result(self, stdin: &[u8]) -> Result<Value, CniError> {
        let stdout = self.finish()?;
        fixup_result_version(stdin, &stdout)
    }
}

/// Runs a verb whose stdout is a result (ADD, or a delegated ADD) and returns the result JSON.
/// `null` output is tolerated, and a result without `cniVersion` is taken to be in the
/// request's version (libcni `fixupResultVersion`).
pub fn exec_plugin_with_result(
    plugin: &Path,
    stdin: &[u8],
    env: &[(String, String)],
) -> Result<Value, CniError> {
    start_plugin(plugin, stdin, env)?.finish_with_result(stdin)
}

/// Runs a verb without output (DEL, CHECK, GC, STATUS); stdout is ignored.
pub fn exec_plugin_without_result(
    plugin: &Path,
    stdin: &[u8],
    env: &[(String, String)],
) -> Result<(), CniError> {
    exec_plugin(plugin, stdin, env).map(|_| ())
}

/// Asks a plugin which spec versions it supports (Go `GetVersionInfo`).
pub fn get_version_info(plugin: &Path) -> Result<PluginInfo, CniError> {
    let args = ExecArgs {
        command: "VERSION".into(),
        // Dummy values for old skeletons that required them even for VERSION.
        netns: "dummy".into(),
        ifname: "dummy".into(),
        path: "dummy".into(),
        ..Default::default()
    };
    let stdin = format!("{{\"cniVersion\":\"{}\"}}", crate::version::CURRENT);
    let stdout = match exec_plugin(plugin, stdin.as_bytes(), &args.env()) {
        Ok(out) => out,
        // Plugins older than 0.2.0 know no VERSION.
        Err(e) if e.to_string() == "unknown CNI_COMMAND: VERSION" => {
            return Ok(PluginInfo {
                cni_version: "0.1.0".into(),
                supported_versions: vec!["0.1.0".into()],
            })
        }
        Err(e) => return Err(e),
    };
    decode_version_info(&stdout)
}

/// Decodes a VERSION answer; a 0.2.0 answer may omit `supportedVersions`.
pub fn decode_version_info(stdout: &[u8]) -> Result<PluginInfo, CniError> {
    let value: Value = gojson::parse(stdout).map_err(InvokeError::VersionJson)?;
    let cni_version = gojson::get_in(&value, "cniVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if cni_version.is_empty() {
        return Err(InvokeError::VersionFieldMissing("cniVersion").into());
    }
    let supported: Vec<String> = match gojson::get_in(&value, "supportedVersions") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or(InvokeError::VersionListShape("hold strings"))
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
        Some(_) => return Err(InvokeError::VersionListShape("be a list").into()),
    };
    if supported.is_empty() {
        if cni_version == "0.2.0" {
            return Ok(PluginInfo {
                cni_version,
                supported_versions: vec!["0.1.0".into(), "0.2.0".into()],
            });
        }
        return Err(InvokeError::VersionFieldMissing("supportedVersions").into());
    }
    Ok(PluginInfo {
        cni_version,
        supported_versions: supported,
    })
}

/// Runs another plugin on behalf of the current one (spec §4 delegation, Go `DelegateAdd` &
/// co.): the binary is found via `CNI_PATH` from our environment, it inherits our whole
/// environment with only `CNI_COMMAND` replaced by `command`, and gets `stdin` as its config.
///
/// Returns the parsed stdout: for `ADD` always `Some(result)` (version fixed up as in
/// [`exec_plugin_with_result`]); for other verbs `None` unless the delegate printed JSON.
pub fn delegate(plugin_type: &str, command: &str, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    let paths = split_path_list(&std::env::var("CNI_PATH").unwrap_or_default());
    let plugin = find_in_path(plugin_type, &paths)?;
    let env = [("CNI_COMMAND".to_string(), command.to_string())];
    if command == "ADD" {
        return exec_plugin_with_result(&plugin, stdin, &env).map(Some);
    }
    let stdout = exec_plugin(&plugin, stdin, &env)?;
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Ok(gojson::parse(&stdout).ok().filter(|v| !v.is_null()))
}

/// The least a Linux pipe holds (one page, when the user's pipe quota is exhausted).
const PIPE_MIN_CAPACITY: usize = 4096;

fn start_once(plugin: &Path, stdin: &[u8], env: &[(String, String)]) -> std::io::Result<Running> {
    let mut cmd = Command::new(plugin);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(OsStr::new(k), OsStr::new(v));
    }
    if stdin.len() <= PIPE_MIN_CAPACITY {
        // An empty pipe takes this much without blocking, so the input is in the pipe, and
        // its end written, before the plugin starts: its first read finds it whole instead
        // of waiting for us (an exec sits on every pod's ADD path), and no thread is needed.
        cmd.stdin(filled_pipe(stdin)?);
        return Ok(Running::Child(cmd.spawn()?));
    }
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn()?;
    let child_stdin = child.stdin.take();
    // Feed stdin from another thread: a plugin may write a lot before reading all its input.
    std::thread::scope(|scope| {
        scope.spawn(move || {
            if let Some(mut pipe) = child_stdin {
                // A plugin that exits without reading its stdin closes the pipe: not our error.
                let _ = pipe.write_all(stdin);
            }
        });
        collect_output(child).map(Running::Done)
    })
}

/// A pipe holding `input` (at most [`PIPE_MIN_CAPACITY`] bytes) with its write end closed,
/// as a child's stdin.
fn filled_pipe(input: &[u8]) -> std::io::Result<Stdio> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two new descriptors on success, which become ours.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and nobody else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    std::fs::File::from(write).write_all(input)?;
    Ok(Stdio::from(read))
}

/// What reading a plugin's stdout and stderr starts with: a result fits.
const OUTPUT_CHUNK: usize = 16 * 1024;

/// Reads the child's stdout and stderr to their ends, both at once (a plugin may fill one
/// while we wait on the other), then reaps it. std's `wait_with_output` does the same with
/// buffers that start at 32 bytes, which costs a result a read per doubling.
fn collect_output(mut child: Child) -> std::io::Result<std::process::Output> {
    use std::os::fd::AsRawFd;
    let (Some(mut out_pipe), Some(mut err_pipe)) = (child.stdout.take(), child.stderr.take())
    else {
        return child.wait_with_output();
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut chunk = vec![0u8; OUTPUT_CHUNK];
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        let mut fds = [
            libc::pollfd {
                fd: if out_open { out_pipe.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if err_open { err_pipe.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: polls two descriptors we own, for as long as `fds` lives.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 {
            out_open = read_some(&mut out_pipe, &mut chunk, &mut stdout)?;
        }
        if fds[1].revents != 0 {
            err_open = read_some(&mut err_pipe, &mut chunk, &mut stderr)?;
        }
    }
    let status = child.wait()?;
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// One read from a ready pipe into `into`; false at its end.
fn read_some(
    pipe: &mut impl std::io::Read,
    chunk: &mut [u8],
    into: &mut Vec<u8>,
) -> std::io::Result<bool> {
    loop {
        match pipe.read(chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                into.extend_from_slice(&chunk[..n]);
                return Ok(true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn pass_stderr_through(stderr: &[u8]) {
    if !stderr.is_empty() {
        let _ = std::io::stderr().write_all(stderr);
    }
}

fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("signal: {sig}"),
        _ => status.to_string(),
    }
}

/// The error a failed plugin reported (libcni `pluginErr`).
fn plugin_error(status: &ExitStatus, stdout: &[u8], stderr: &[u8]) -> CniError {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        if stderr.is_empty() {
            return InvokeError::Silent { status: *status }.into();
        }
        return InvokeError::StderrOnly {
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            status: *status,
        }
        .into();
    }
    pass_stderr_through(stderr);
    match parse_error_json(stdout) {
        Ok(e) => e,
        Err(why) => InvokeError::BadDiagnostic {
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            why,
        }
        .into(),
    }
}

/// Parses `{code, msg, details}` leniently: a missing code is reported as 999 (a plugin error
/// must never look like success), missing texts as empty.
fn parse_error_json(stdout: &[u8]) -> Result<CniError, String> {
    let value: Value = gojson::parse(stdout).map_err(|e| e.to_string())?;
    let obj = value.as_object().ok_or("not a JSON object")?;
    let text = |key: &str| -> Result<String, String> {
        match gojson::get(obj, key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{key} is not a string")),
        }
    };
    let code = match gojson::get(obj, "code") {
        None => codes::INTERNAL,
        Some(v) => v
            .as_u64()
            .and_then(|c| u32::try_from(c).ok())
            .ok_or("code is not an unsigned integer")?,
    };
    Ok(CniError::new(code, text("msg")?, text("details")?))
}

/// Plugin stdout of a result-returning verb → result JSON with a `cniVersion`.
fn fixup_result_version(request: &[u8], stdout: &[u8]) -> Result<Value, CniError> {
    let value: Value = gojson::parse(stdout).map_err(InvokeError::ResultJson)?;
    let mut obj = match value {
        Value::Null => Map::new(),
        Value::Object(obj) => obj,
        _ => return Err(InvokeError::ResultNotObject.into()),
    };
    if gojson::get(&obj, "cniVersion").is_none() {
        obj.insert("cniVersion".into(), request_version(request).into());
    }
    Ok(Value::Object(obj))
}

/// The request's `cniVersion` (`0.1.0` when absent, as the Go config decoder says).
fn request_version(request: &[u8]) -> String {
    gojson::parse(request)
        .ok()
        .and_then(|v| {
            gojson::get_in(&v, "cniVersion")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "0.1.0".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefilled_stdin_and_two_outputs_bigger_than_a_pipe_arrive_whole() {
        // Each output is bigger than a pipe holds, so reading one to its end before the other
        // would deadlock; the input must be there, with its end, when the child starts.
        let script = "cat; head -c 200000 /dev/zero | tr '\\0' a; \
                      head -c 100000 /dev/zero | tr '\\0' b >&2";
        let child = Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(filled_pipe(b"{\"cniVersion\":\"1.1.0\"}").unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = collect_output(child).unwrap();
        assert!(out.status.success());
        let (input, rest) = out.stdout.split_at(22);
        assert_eq!(input, b"{\"cniVersion\":\"1.1.0\"}");
        assert_eq!(rest.len(), 200_000);
        assert!(rest.iter().all(|b| *b == b'a'));
        assert_eq!(out.stderr.len(), 100_000);
        assert!(out.stderr.iter().all(|b| *b == b'b'));
    }

    #[test]
    fn env_holds_all_six_variables() {
        let args = ExecArgs {
            command: "ADD".into(),
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            plugin_args: vec![("A".into(), "1".into()), ("B".into(), "2".into())],
            ifname: "eth0".into(),
            path: "/opt/cni/bin".into(),
        };
        let env = args.env();
        assert_eq!(env.len(), 6);
        assert!(env.contains(&("CNI_ARGS".into(), "A=1;B=2".into())));
    }

    #[test]
    fn find_in_path_rejects_bad_names() {
        assert_eq!(
            find_in_path("", &[PathBuf::from("/bin")]).unwrap_err().msg,
            "no plugin name provided"
        );
        assert!(find_in_path("../sh", &[PathBuf::from("/bin")]).is_err());
        assert!(find_in_path("a\\b", &[PathBuf::from("/bin")]).is_err());
        let e = find_in_path(
            "no-such-plugin-xyz",
            &[PathBuf::from("/a"), PathBuf::from("/b")],
        )
        .unwrap_err();
        assert_eq!(
            e.msg,
            "failed to find plugin \"no-such-plugin-xyz\" in path [/a /b]"
        );
    }

    #[test]
    fn version_info_decoding() {
        let i =
            decode_version_info(br#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#)
                .unwrap();
        assert_eq!(i.supported_versions, ["0.4.0", "1.0.0"]);
        let i = decode_version_info(br#"{"cniVersion":"0.2.0"}"#).unwrap();
        assert_eq!(i.supported_versions, ["0.1.0", "0.2.0"]);
        assert!(decode_version_info(br#"{"cniVersion":"0.3.0"}"#).is_err());
        assert!(decode_version_info(b"{}").is_err());
    }

    #[test]
    fn result_version_fixup() {
        let req = br#"{"cniVersion":"0.4.0","name":"n"}"#;
        assert_eq!(
            fixup_result_version(req, b"null").unwrap(),
            serde_json::json!({"cniVersion":"0.4.0"})
        );
        let v = fixup_result_version(req, br#"{"cniVersion":"1.0.0","ips":[]}"#).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        let v = fixup_result_version(b"{}", br#"{"ips":[]}"#).unwrap();
        assert_eq!(v["cniVersion"], "0.1.0");
        assert!(fixup_result_version(req, b"").is_err());
        assert!(fixup_result_version(req, b"[1]").is_err());
    }

    #[test]
    fn error_json_parsing() {
        let e = parse_error_json(br#"{"code":7,"msg":"bad","details":"d"}"#).unwrap();
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (7, "bad", "d")
        );
        assert_eq!(parse_error_json(br#"{"msg":"x"}"#).unwrap().code, 999);
        assert!(parse_error_json(b"oops").is_err());
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn cni(e: InvokeError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(InvokeError::NoPluginName),
            (999, "no plugin name provided".into())
        );
        assert_eq!(
            cni(InvokeError::NotFound {
                plugin: "bridge".into(),
                paths: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()]
            }),
            (
                7,
                "failed to find plugin \"bridge\" in path [/opt/cni/bin /usr/lib/cni]".into()
            )
        );
        assert_eq!(cni(InvokeError::InvalidPluginName("a/b".into())).0, 7);
        assert_eq!(cni(InvokeError::NoPaths).0, 7);
        assert_eq!(
            cni(InvokeError::Silent {
                status: ExitStatus::from_raw(1 << 8)
            }),
            (
                999,
                "netplugin failed with no error message: exit status 1".into()
            )
        );
        assert_eq!(
            cni(InvokeError::StderrOnly {
                stderr: "boom".into(),
                status: ExitStatus::from_raw(9)
            }),
            (999, "netplugin failed: \"boom\": signal: 9".into())
        );
        assert_eq!(
            cni(InvokeError::VersionFieldMissing("cniVersion")),
            (6, "decoding version info: missing field cniVersion".into())
        );
        assert_eq!(
            cni(InvokeError::VersionListShape("be a list")),
            (
                6,
                "decoding version info: supportedVersions must be a list".into()
            )
        );
        assert_eq!(
            cni(InvokeError::ResultNotObject),
            (
                6,
                "failed to unmarshal raw result: not a JSON object".into()
            )
        );
    }
}
