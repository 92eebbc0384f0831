//! `fault-shim`: stands in for a plugin binary (a symlink named like the plugin, in the
//! `CNI_PATH` a fault test hands to the runtime) and runs the real one, killing it with
//! SIGKILL at a planned moment. Used by `netns-tests/tests/faults_kill.rs`.
//!
//! Environment:
//! - `FERROCNI_FAULT_REAL_DIR`: directory of the real plugin binaries (required);
//! - `FERROCNI_FAULT_PLAN`: a file `<plugin> <CNI_COMMAND> <delay µs>`. The first invocation of
//!   that plugin for that command takes the plan (renames the file) and is killed `delay` µs
//!   after it started, unless it has exited by then;
//! - `FERROCNI_FAULT_LOG`: where the outcome is appended: `hit <plugin> <command> <delay>` when
//!   the plugin was still running and was killed, `miss ...` when it had already exited.
//!
//! A killed plugin's shim kills itself with SIGKILL too, so its caller sees what it would see if
//! the plugin had been killed. Without a matching plan the shim just execs the real plugin.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

fn log(line: &str) {
    if let Some(path) = std::env::var_os("FERROCNI_FAULT_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The planned delay if this invocation is the one the plan names (and it won the plan).
fn take_plan(name: &str, command: &str) -> Option<Duration> {
    let plan = PathBuf::from(std::env::var_os("FERROCNI_FAULT_PLAN")?);
    let text = std::fs::read_to_string(&plan).ok()?;
    let mut words = text.split_whitespace();
    let (plugin, verb, delay) = (words.next()?, words.next()?, words.next()?);
    if plugin != name || verb != command {
        return None;
    }
    let delay = Duration::from_micros(delay.parse().ok()?);
    // Only one invocation takes the plan, even when several run at once.
    let taken = plan.with_extension(format!("taken-{}", std::process::id()));
    std::fs::rename(&plan, &taken).ok()?;
    Some(delay)
}

fn main() -> ExitCode {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(real_dir) = std::env::var_os("FERROCNI_FAULT_REAL_DIR") else {
        eprintln!("fault-shim: FERROCNI_FAULT_REAL_DIR is not set");
        return ExitCode::from(1);
    };
    let real = Path::new(&real_dir).join(&name);
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    let mut cmd = Command::new(&real);
    cmd.args(std::env::args_os().skip(1));
    let Some(delay) = take_plan(&name, &command) else {
        let e = cmd.exec();
        eprintln!("fault-shim: cannot exec {}: {e}", real.display());
        return ExitCode::from(1);
    };
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fault-shim: cannot run {}: {e}", real.display());
            return ExitCode::from(1);
        }
    };
    let deadline = started + delay;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                log(&format!("miss {name} {command} {}", delay.as_micros()));
                return match status.code() {
                    Some(code) => ExitCode::from(code as u8),
                    None => ExitCode::from(128 + status.signal().unwrap_or(0) as u8),
                };
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("fault-shim: wait: {e}");
                return ExitCode::from(1);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_micros(50)));
    }
    let _ = child.kill();
    let _ = child.wait();
    log(&format!("hit {name} {command} {}", delay.as_micros()));
    // SAFETY: kill(2) on our own pid with a valid signal has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    ExitCode::from(137)
}
