//! `cnitool`: run a network configuration against a network namespace, like the reference tool.
//!
//! ```text
//! cnitool [-i IFNAME] add|check|del|gc|status <network> <netns-path>
//! cnitool list [--policy skip-invalid|fail-on-invalid]
//! ```
//! Environment: `NETCONFPATH` (default /etc/cni/net.d), `CNI_PATH`, `CNI_ARGS` (`K=V;...`),
//! `CAP_ARGS` (JSON object), `CNI_IFNAME` (default eth0; `-i/--ifname` wins),
//! `CNI_CACHE_DIR` (default /var/lib/cni), `CNITOOL_POLICY` (default policy for `list`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use libcni::api::{absolute_clean_path, cnitool_container_id, CniConfig, RuntimeConf};
use libcni::conf::{self, DefaultPolicy};
use libcni::error::to_indented_json;
use serde_json::{Map, Value};

const USAGE: &str = "\
usage: cnitool [-i IFNAME] add|check|del|gc|status <network> <netns-path>
       cnitool list [--policy skip-invalid|fail-on-invalid]
       cnitool --version

Environment:
  NETCONFPATH    configuration directory (default /etc/cni/net.d)
  CNI_PATH       plugin directories, ':'-separated
  CNI_ARGS       extra plugin arguments, K=V;K2=V2
  CAP_ARGS       capability arguments, a JSON object
  CNI_IFNAME     interface name in the namespace (default eth0; -i/--ifname wins)
  CNI_CACHE_DIR  result cache directory (default /var/lib/cni)
  CNITOOL_POLICY default-network policy for `list` (default fail-on-invalid)";

const DEFAULT_NETCONFPATH: &str = "/etc/cni/net.d";
const DEFAULT_IFNAME: &str = "eth0";

/// Parsed command line.
struct Cli {
    verb: String,
    positionals: Vec<String>,
    ifname: Option<String>,
    policy: Option<String>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a line on stdout. A reader that went away (`cnitool ... | head`) ends us with
/// SIGPIPE, as Go's cnitool (whose runtime does this for stdout only: a plugin closing its
/// stdin early stays an error, not a death), instead of a panic on the failed write.
fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // SAFETY: the default disposition restored, then the signal sent to ourselves.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
        }
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let cli = parse_cli(args)?;
    match cli.verb.as_str() {
        "version" => {
            out(&format!("cnitool {}", libcni::skel::SUITE_VERSION));
            Ok(())
        }
        "help" => {
            out(USAGE);
            Ok(())
        }
        "list" => list(&cli),
        "add" | "check" | "del" | "gc" | "status" => network_verb(&cli),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}

fn parse_cli(args: &[String]) -> Result<Cli, String> {
    let mut positionals = Vec::new();
    let mut ifname = None;
    let mut policy = None;
    let mut iter = args.iter();
    let mut flags_done = false;
    while let Some(arg) = iter.next() {
        if flags_done || !arg.starts_with('-') || arg == "-" {
            positionals.push(arg.clone());
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => iter
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("flag {name} needs a value\n{USAGE}")),
            }
        };
        match flag {
            "--" => flags_done = true,
            "-h" | "--help" => positionals.insert(0, "help".into()),
            "--version" => positionals.insert(0, "version".into()),
            "-i" | "--ifname" => ifname = Some(value(flag)?),
            "--policy" => policy = Some(value(flag)?),
            _ => return Err(format!("unknown flag {arg:?}\n{USAGE}")),
        }
    }
    if positionals.is_empty() {
        return Err(USAGE.to_string());
    }
    let verb = positionals.remove(0);
    Ok(Cli {
        verb,
        positionals,
        ifname,
        policy,
    })
}

fn env_or(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => default.to_string(),
    }
}

fn conf_dir() -> PathBuf {
    PathBuf::from(env_or("NETCONFPATH", DEFAULT_NETCONFPATH))
}

fn network_verb(cli: &Cli) -> Result<(), String> {
    // gc and status do not use the namespace; accept it for compatibility but don't need it.
    let needs_netns = !matches!(cli.verb.as_str(), "gc" | "status");
    let (network, netns) = match cli.positionals.as_slice() {
        [network, netns] => (network.as_str(), Some(netns.as_str())),
        [network] if !needs_netns => (network.as_str(), None),
        _ => return Err(USAGE.to_string()),
    };

    let list = conf::load_network(&conf_dir(), network).map_err(|e| e.to_string())?;
    let cni = CniConfig::new(
        libcni::api::plugin_paths_from(&std::env::var("CNI_PATH").unwrap_or_default()),
        env_or("CNI_CACHE_DIR", libcni::cache::DEFAULT_CACHE_DIR),
    );

    match cli.verb.as_str() {
        "gc" => return cni.gc_network_list(&list, None).map_err(|e| e.to_string()),
        "status" => {
            return cni
                .get_status_network_list(&list)
                .map_err(|e| e.to_string())
        }
        _ => {}
    }

    let netns = absolute_clean_path(netns.unwrap_or_default());
    let ifname = match &cli.ifname {
        Some(i) => i.clone(),
        None => env_or("CNI_IFNAME", DEFAULT_IFNAME),
    };
    let rt = RuntimeConf {
        container_id: cnitool_container_id(&netns),
        netns,
        ifname,
        args: parse_cnitool_args(&std::env::var("CNI_ARGS").unwrap_or_default())?,
        capability_args: parse_cap_args(&std::env::var("CAP_ARGS").unwrap_or_default())?,
    };

    match cli.verb.as_str() {
        "add" => {
            let result = cni
                .add_network_list(&list, &rt)
                .map_err(|e| e.to_string())?;
            out(&to_indented_json(&result));
            Ok(())
        }
        "check" => cni
            .check_network_list(&list, &rt)
            .map_err(|e| e.to_string()),
        _ => cni.del_network_list(&list, &rt).map_err(|e| e.to_string()),
    }
}

/// cnitool's CNI_ARGS rule: every `;`-separated pair is exactly `key=value`, both non-empty.
fn parse_cnitool_args(s: &str) -> Result<Vec<(String, String)>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(';')
        .map(|pair| {
            let mut kv = pair.split('=');
            match (kv.next(), kv.next(), kv.next()) {
                (Some(k), Some(v), None) if !k.is_empty() && !v.is_empty() => {
                    Ok((k.to_string(), v.to_string()))
                }
                _ => Err(format!("invalid CNI_ARGS pair {pair:?}")),
            }
        })
        .collect()
}

fn parse_cap_args(s: &str) -> Result<Map<String, Value>, String> {
    if s.is_empty() {
        return Ok(Map::new());
    }
    match libcni::gojson::parse(s.as_bytes()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("CAP_ARGS must be a JSON object".into()),
        Err(e) => Err(format!("failed to parse CAP_ARGS: {e}")),
    }
}

fn list(cli: &Cli) -> Result<(), String> {
    if !cli.positionals.is_empty() {
        return Err(USAGE.to_string());
    }
    let policy_name = cli
        .policy
        .clone()
        .unwrap_or_else(|| env_or("CNITOOL_POLICY", "fail-on-invalid"));
    let policy: DefaultPolicy = policy_name.parse()?;
    let dir = conf_dir();
    let entries = conf::list_dir(&dir).map_err(|e| e.to_string())?;
    out(&format!(
        "{} (default-network policy: {policy_name})",
        dir.display()
    ));
    if entries.is_empty() {
        return Err(format!(
            "no network configuration files in {}",
            dir.display()
        ));
    }
    let default = conf::default_index(&entries, policy);
    let width = entries
        .iter()
        .map(|e| file_name(&e.path).len())
        .max()
        .unwrap_or(0);
    for (i, entry) in entries.iter().enumerate() {
        let mark = if Some(i) == default { '*' } else { ' ' };
        let name = file_name(&entry.path);
        match &entry.result {
            Ok(list) => {
                let plugins: Vec<&str> = list
                    .plugins
                    .iter()
                    .map(|p| p.plugin_type.as_str())
                    .collect();
                out(&format!(
                    "{mark} {name:<width$}  {}  cniVersion={}  plugins={}",
                    list.name,
                    if list.cni_version.is_empty() {
                        "-"
                    } else {
                        &list.cni_version
                    },
                    plugins.join(",")
                ));
            }
            Err(e) => out(&format!("{mark} {name:<width$}  INVALID: {e}")),
        }
    }
    match default {
        Some(i) => {
            if let Ok(list) = &entries[i].result {
                out(&format!(
                    "default network: {} ({})",
                    list.name,
                    file_name(&entries[i].path)
                ));
            }
            Ok(())
        }
        None => Err(format!(
            "no default network: {}",
            match policy {
                DefaultPolicy::FailOnInvalid => "the first configuration file is invalid",
                DefaultPolicy::SkipInvalid => "no configuration file is valid",
            }
        )),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
