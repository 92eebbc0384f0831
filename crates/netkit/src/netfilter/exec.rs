//! Running a netfilter tool and classifying its failures.

use std::io::Write;
use std::process::{Command, Stdio};

/// Shorthand for netfilter results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed netfilter operation; every message names the tool and what was attempted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tool is not installed (not found in the usual sbin directories nor in PATH).
    #[error("{context}: the {tool:?} tool is not installed (install iptables/nftables)")]
    ToolMissing { context: String, tool: String },
    /// The tool ran and reported an error.
    #[error("{context}: `{command}` failed ({status}): {stderr}")]
    Failed {
        context: String,
        command: String,
        status: String,
        stderr: String,
    },
    /// Spawning or talking to the tool failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The tool's output could not be understood.
    #[error("{context}: cannot parse the output of {tool}: {detail}")]
    Parse {
        context: String,
        tool: String,
        detail: String,
    },
    /// A caller-supplied value is unusable (e.g. a name with characters the tool rejects).
    #[error("{context}: {detail}")]
    Invalid { context: String, detail: String },
    /// The kernel refused an nf_tables netlink request (positive errno).
    #[error("{context}: {}{}", std::io::Error::from_raw_os_error(*errno), ext_ack.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        context: String,
        errno: i32,
        ext_ack: Option<String>,
    },
}

impl Error {
    /// Prepends an outer context to the message.
    pub fn context(mut self, outer: impl std::fmt::Display) -> Self {
        let slot = match &mut self {
            Error::ToolMissing { context, .. }
            | Error::Failed { context, .. }
            | Error::Io { context, .. }
            | Error::Parse { context, .. }
            | Error::Invalid { context, .. }
            | Error::Kernel { context, .. } => context,
        };
        *slot = if slot.is_empty() {
            outer.to_string()
        } else {
            format!("{outer}: {slot}")
        };
        self
    }

    /// The tool is missing.
    pub fn is_tool_missing(&self) -> bool {
        matches!(self, Error::ToolMissing { .. })
    }

    /// The tool or the kernel said the chain/rule/table does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Failed { stderr, .. } => is_not_found_text(stderr),
            Error::Kernel { errno, .. } => *errno == libc::ENOENT,
            _ => false,
        }
    }

    /// The kernel's errno, for netlink failures.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Recognises the "does not exist" messages of iptables-legacy, iptables-nft and nft.
pub(crate) fn is_not_found_text(stderr: &str) -> bool {
    stderr.contains("No chain/target/match by that name")
        || stderr.contains("does a matching rule exist")
        || stderr.contains("No such file or directory")
        || stderr.contains("does not exist")
}

/// The output of a finished tool run.
#[derive(Debug)]
pub struct Output {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Where netfilter tools are looked up: fixed sbin directories first, then PATH, so a minimal
/// PATH of the runtime does not hide them.
const SBIN_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"];

/// Finds `tool` (a bare name like "iptables").
pub fn find_tool(tool: &str) -> Option<std::path::PathBuf> {
    let path_var = std::env::var("PATH").unwrap_or_default();
    SBIN_DIRS
        .iter()
        .map(std::path::PathBuf::from)
        .chain(
            path_var
                .split(':')
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
        )
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A tool started with [`spawn`], running concurrently with the caller.
pub struct Pending {
    child: std::process::Child,
    tool: String,
    context: String,
}

impl Pending {
    /// Waits for the tool and collects its output.
    pub fn wait(self) -> Result<Output> {
        let tool = self.tool;
        let context = self.context;
        let out = self.child.wait_with_output().map_err(|source| Error::Io {
            context: format!("{context}: failed to run {tool}"),
            source,
        })?;
        Ok(Output {
            success: out.status.success(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Starts `tool args...` (no stdin) without waiting, so independent tools can run in parallel.
pub fn spawn(tool: &str, args: &[&str], context: &str) -> Result<Pending> {
    let Some(bin) = find_tool(tool) else {
        return Err(Error::ToolMissing {
            context: context.to_string(),
            tool: tool.to_string(),
        });
    };
    let child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Io {
            context: format!("{context}: failed to run {tool}"),
            source,
        })?;
    Ok(Pending {
        child,
        tool: tool.to_string(),
        context: context.to_string(),
    })
}

/// Runs `tool args...` with optional stdin; a non-zero exit is returned as `Output`, not an error.
pub fn run(tool: &str, args: &[&str], stdin: Option<&[u8]>, context: &str) -> Result<Output> {
    let Some(bin) = find_tool(tool) else {
        return Err(Error::ToolMissing {
            context: context.to_string(),
            tool: tool.to_string(),
        });
    };
    let mut cmd = Command::new(&bin);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let io_err = |source| Error::Io {
        context: format!("{context}: failed to run {tool}"),
        source,
    };
    let mut child = cmd.spawn().map_err(io_err)?;
    if let Some(input) = stdin {
        if let Some(mut pipe) = child.stdin.take() {
            // nft reads its whole input before acting; a short write means it exited early,
            // which the exit status reports.
            let _ = pipe.write_all(input);
        }
    }
    let out = child.wait_with_output().map_err(io_err)?;
    Ok(Output {
        success: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Runs the tool and turns a non-zero exit into [`Error::Failed`].
pub fn run_ok(tool: &str, args: &[&str], stdin: Option<&[u8]>, context: &str) -> Result<String> {
    let out = run(tool, args, stdin, context)?;
    if out.success {
        Ok(out.stdout)
    } else {
        Err(failed(tool, args, &out, context))
    }
}

pub(crate) fn failed(tool: &str, args: &[&str], out: &Output, context: &str) -> Error {
    Error::Failed {
        context: context.to_string(),
        command: format!("{tool} {}", args.join(" ")),
        status: match out.code {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".to_string(),
        },
        stderr: out.stderr.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_is_reported_clearly() {
        let e = run(
            "definitely-not-a-netfilter-tool",
            &[],
            None,
            "failed to list rules",
        )
        .unwrap_err();
        assert!(e.is_tool_missing());
        assert!(
            e.to_string().contains("definitely-not-a-netfilter-tool"),
            "{e}"
        );
    }

    #[test]
    fn not_found_texts() {
        assert!(is_not_found_text(
            "iptables: No chain/target/match by that name."
        ));
        assert!(is_not_found_text(
            "iptables: Bad rule (does a matching rule exist in that chain?)."
        ));
        assert!(is_not_found_text("Error: No such file or directory"));
        assert!(!is_not_found_text("iptables: Chain already exists."));
    }
}
