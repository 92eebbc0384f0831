//! `ferrocni-agent install-cni`: the container image's installer (kube-flannel's install-cni
//! pattern). Run as a DaemonSet's init container with the host's `/opt/cni/bin` and CNI conf
//! dir mounted, it copies the image's plugins and conflist there. Each file is written beside
//! its destination and renamed over it, so a runtime exec'ing a plugin meanwhile sees the old
//! binary or the new one, never a half-written file.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::AgentError;

pub const USAGE: &str = "\
ferrocni-agent install-cni: copies the CNI plugins and a conflist onto the host.

Options:
  --source-dir DIR   the plugins to install (default /opt/cni/bin, the image's)
  --bin-dir DIR      the host's plugin directory, mounted (default /host/opt/cni/bin)
  --conflist PATH    a conflist to install (default /etc/ferrocni/10-flannel.conflist when it
                     exists; `none` installs none)
  --conf-dir DIR     the host's CNI conf dir, mounted (default /host/etc/cni/net.d)
  -h, --help
";

#[derive(Debug, PartialEq)]
pub struct InstallOptions {
    pub source_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub conflist: Option<PathBuf>,
    pub conf_dir: PathBuf,
}

const DEFAULT_CONFLIST: &str = "/etc/ferrocni/10-flannel.conflist";

/// `Ok(None)` means help was asked for.
pub fn parse(args: &[String]) -> Result<Option<InstallOptions>, AgentError> {
    let mut o = InstallOptions {
        source_dir: "/opt/cni/bin".into(),
        bin_dir: "/host/opt/cni/bin".into(),
        conflist: Some(DEFAULT_CONFLIST.into()),
        conf_dir: "/host/etc/cni/net.d".into(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        if matches!(flag, "-h" | "--help") {
            return Ok(None);
        }
        let value = inline
            .or_else(|| it.next().cloned())
            .ok_or_else(|| AgentError::Usage(format!("install-cni {flag} needs a value")))?;
        match flag {
            "--source-dir" => o.source_dir = value.into(),
            "--bin-dir" => o.bin_dir = value.into(),
            "--conf-dir" => o.conf_dir = value.into(),
            "--conflist" => o.conflist = (value != "none").then(|| value.into()),
            other => {
                return Err(AgentError::Usage(format!(
                    "install-cni: unknown option {other:?} (see install-cni --help)"
                )))
            }
        }
    }
    Ok(Some(o))
}

/// Copies `from` to `to` through a temporary beside it, with `mode`.
fn install_file(from: &Path, to: &Path, mode: u32) -> Result<(), AgentError> {
    let bytes = fs::read(from).map_err(|e| AgentError::io("reading", from, e))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A leading dot keeps the temporary out of `*.conflist` globs and plugin lookups.
    let tmp = dir.join(format!(".{name}.ferrocni-install.{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        fs::rename(&tmp, to)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(AgentError::io("installing", to, e));
    }
    Ok(())
}

/// Installs every executable of `source_dir` (the agent itself excepted: it runs from the
/// image) and the conflist. Returns the installed paths.
pub fn run(o: &InstallOptions) -> Result<Vec<PathBuf>, AgentError> {
    for dir in [&o.bin_dir, &o.conf_dir] {
        fs::create_dir_all(dir).map_err(|e| AgentError::io("creating directory", dir, e))?;
    }
    let entries =
        fs::read_dir(&o.source_dir).map_err(|e| AgentError::io("reading", &o.source_dir, e))?;
    let mut plugins: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                && p.file_name().is_some_and(|n| n != "ferrocni-agent")
        })
        .collect();
    plugins.sort();
    if plugins.is_empty() {
        return Err(AgentError::io(
            "finding plugins in",
            &o.source_dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no executable in it"),
        ));
    }
    let mut installed = Vec::new();
    for p in plugins {
        let to = o.bin_dir.join(p.file_name().unwrap_or_default());
        install_file(&p, &to, 0o755)?;
        installed.push(to);
    }
    if let Some(conflist) = &o.conflist {
        // The default conflist is optional; one asked for by name must exist.
        let wanted = conflist != Path::new(DEFAULT_CONFLIST);
        if conflist.exists() || wanted {
            let to = o.conf_dir.join(conflist.file_name().unwrap_or_default());
            install_file(conflist, &to, 0o644)?;
            installed.push(to);
        }
    }
    Ok(installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_executables_and_the_conflist() {
        let root = std::env::temp_dir().join(format!("agent-install-cni-{}", std::process::id()));
        let src = root.join("src");
        fs::create_dir_all(&src).unwrap();
        for (name, mode) in [
            ("bridge", 0o755),
            ("ferrocni-agent", 0o755),
            ("README", 0o644),
        ] {
            fs::write(src.join(name), name).unwrap();
            fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
        }
        let conflist = root.join("10-flannel.conflist");
        fs::write(&conflist, "{}").unwrap();
        let args: Vec<String> = [
            "--source-dir",
            src.to_str().unwrap(),
            "--bin-dir",
            root.join("host/bin").to_str().unwrap(),
            "--conf-dir",
            root.join("host/net.d").to_str().unwrap(),
            "--conflist",
            conflist.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse(&args).unwrap().unwrap();
        // Twice: a re-run over installed files (the init container restarting) is fine.
        run(&o).unwrap();
        let installed = run(&o).unwrap();
        assert_eq!(installed.len(), 2, "{installed:?}");
        let bridge = root.join("host/bin/bridge");
        assert_eq!(fs::read(&bridge).unwrap(), b"bridge");
        assert_eq!(
            bridge.metadata().unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert!(!root.join("host/bin/ferrocni-agent").exists());
        assert!(!root.join("host/bin/README").exists());
        assert_eq!(
            fs::read(root.join("host/net.d/10-flannel.conflist")).unwrap(),
            b"{}"
        );
        assert_eq!(fs::read_dir(root.join("host/bin")).unwrap().count(), 1);
        // A named conflist that is missing is an error; `none` skips it.
        let mut missing = o;
        missing.conflist = Some(root.join("nope.conflist"));
        assert!(run(&missing).is_err());
        assert!(parse(&["--conflist=none".into()])
            .unwrap()
            .unwrap()
            .conflist
            .is_none());
        assert!(parse(&["--bogus=1".into()]).is_err());
        fs::remove_dir_all(&root).unwrap();
    }
}
