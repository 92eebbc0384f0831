//! Loading network configurations from a configuration directory (runtime side).
//!
//! Mirrors the Go libcni loader (`LoadNetworkConf`, `ConfListFromBytes`, `InjectConf`, ...):
//! * `.conflist` files are network configuration lists; `.conf` and `.json` files are
//!   deprecated single-plugin configurations, up-converted to a one-plugin list.
//! * Plugins may also come from `<dir>/<network name>/*.conf` unless the list sets
//!   `loadOnlyInlinedPlugins`.
//! * `cniVersions` selects the highest listed version this library supports (≤ 1.1.0).
//!
//! On top of that, the runtime-side "default network" convention (the alphabetically first
//! file) is provided with both policies in use by runtimes ([`DefaultPolicy`]), and
//! [`list_dir`] reports every file with its parse outcome (for `cnitool list`).
//!
//! Every file read is capped at [`MAX_CONF_FILE_SIZE`] bytes.

use std::cmp::Ordering;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::gojson;

/// The highest spec version this library implements; `cniVersions` entries above it are ignored.
pub const LIBCNI_SPEC_VERSION: &str = crate::version::CURRENT;

/// Largest configuration file we accept (same limit as containerd's go-cni `MaxFileSize`).
pub const MAX_CONF_FILE_SIZE: u64 = 2 * 1024 * 1024;

/// File extensions of network configuration files.
pub const CONF_EXTENSIONS: &[&str] = &["conf", "conflist", "json"];

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// The directory holds no configuration file of the requested kinds.
    #[error("no net configurations found in {}", dir.display())]
    NoConfigsFound { dir: PathBuf },
    /// No configuration of that name exists in the directory.
    #[error("no net configuration with name \"{name}\" in {}", dir.display())]
    NotFound { dir: PathBuf, name: String },
    /// A file or directory could not be read.
    #[error("error reading {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file exceeds [`MAX_CONF_FILE_SIZE`].
    #[error("{} is too large ({size} bytes); network configuration files are limited to {max} bytes", path.display(), max = MAX_CONF_FILE_SIZE)]
    TooLarge { path: PathBuf, size: u64 },
    /// A path in the directory is not a regular file (a FIFO or device named `*.conf`).
    #[error("{} is not a regular file", path.display())]
    NotRegularFile { path: PathBuf },
    /// The content is not a valid configuration; `path` is set when it came from a file.
    #[error("{}{problem}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Invalid {
        path: Option<PathBuf>,
        problem: Problem,
    },
    /// Runtime values could not be injected into a plugin configuration.
    #[error("failed to inject values into plugin configuration: {0}")]
    Inject(String),
}

/// What is wrong with a configuration's content, in libcni's words.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("error parsing configuration list: {0}")]
    ListJson(#[source] gojson::Error),
    #[error("error parsing configuration list: expected a JSON object, got {0}")]
    ListNotAnObject(&'static str),
    #[error("error parsing configuration list: no name")]
    NoName,
    #[error("error parsing configuration list: invalid name type {0}")]
    NameType(&'static str),
    #[error("error parsing configuration list: invalid cniVersion type {0}")]
    VersionType(&'static str),
    #[error(
        "error parsing configuration list: invalid type for cniVersions index {index}: {kind}"
    )]
    VersionsEntryType { index: usize, kind: &'static str },
    #[error("error parsing configuration list: invalid type for cniVersions: {0}")]
    VersionsType(&'static str),
    #[error("error parsing configuration list: invalid version {0:?}")]
    Version(String),
    #[error("error parsing configuration list: invalid value {value:?} for {key}")]
    BoolValue { key: String, value: String },
    #[error("error parsing configuration list: invalid type {kind} for {key}")]
    BoolType { key: String, kind: &'static str },
    #[error(
        "error parsing configuration list: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"
    )]
    OnlyInlinedWithoutPlugins,
    #[error("error parsing configuration list: no plugins in list")]
    NoPluginsInList,
    #[error("error parsing configuration list: invalid 'plugins' type {0}")]
    PluginsType(&'static str),
    /// A `plugins` entry that is not an object.
    #[error("expected a JSON object, got {0}")]
    PluginNotAnObject(&'static str),
    /// A `plugins` entry that is not a valid plugin configuration.
    #[error("failed to parse plugin config {index}: {cause}")]
    Plugin { index: usize, cause: Box<ConfError> },
    #[error("error parsing configuration: {0}")]
    PluginJson(#[source] gojson::Error),
    #[error("error parsing configuration: expected a JSON object, got {0}")]
    PluginConfNotAnObject(&'static str),
    #[error("error parsing configuration: missing 'type'")]
    MissingType,
    #[error("error parsing configuration: 'type' must be a string, got {0}")]
    TypeNotAString(&'static str),
    #[error("error parsing configuration: capability \"{0}\" must be a boolean")]
    CapabilityNotABool(String),
    #[error("error parsing configuration: 'capabilities' must be an object, got {0}")]
    CapabilitiesType(&'static str),
    #[error("cannot serialize configuration list: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A list file whose plugins (inlined and from its sub-directory) are none.
    #[error("no plugin configs found")]
    NoPluginConfigs,
}

/// A configuration that cannot be read is an I/O error (5), every other problem an invalid
/// configuration (7).
impl From<ConfError> for crate::error::CniError {
    fn from(e: ConfError) -> Self {
        use crate::error::{codes, CniError};
        let code = match &e {
            ConfError::Io { .. } => codes::IO,
            ConfError::NoConfigsFound { .. }
            | ConfError::NotFound { .. }
            | ConfError::TooLarge { .. }
            | ConfError::NotRegularFile { .. }
            | ConfError::Invalid { .. }
            | ConfError::Inject(_) => codes::INVALID_CONFIG,
        };
        CniError::new(code, e.to_string(), "")
    }
}

impl ConfError {
    fn invalid(problem: Problem) -> Self {
        ConfError::Invalid {
            path: None,
            problem,
        }
    }

    /// Attaches the file a parse error came from (other variants already name their path).
    fn in_file(self, file: &Path) -> Self {
        match self {
            ConfError::Invalid {
                path: None,
                problem,
            } => ConfError::Invalid {
                path: Some(file.to_path_buf()),
                problem,
            },
            other => other,
        }
    }
}

/// One plugin object of a list, kept as raw JSON so unknown keys pass through unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    /// The plugin binary name (`type`), never empty.
    pub plugin_type: String,
    /// The complete plugin object as written by the administrator.
    pub raw: Map<String, Value>,
}

impl PluginConf {
    /// Validates a plugin object: it must carry a non-empty string `type`, and `capabilities`
    /// (when present) must map names to booleans.
    pub fn from_map(raw: Map<String, Value>) -> Result<Self, ConfError> {
        // Plugin keys are decoded like Go's types.PluginConf (case-insensitive); list keys
        // are exact, as libcni reads them from a map.
        let plugin_type = match gojson::get(&raw, "type") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(Value::String(_)) | None => return Err(ConfError::invalid(Problem::MissingType)),
            Some(other) => {
                return Err(ConfError::invalid(Problem::TypeNotAString(json_kind(
                    other,
                ))))
            }
        };
        match gojson::get(&raw, "capabilities") {
            None => {}
            Some(Value::Object(caps)) => {
                // Go's map[string]bool reads null as false.
                if let Some((name, _)) = caps.iter().find(|(_, v)| !v.is_boolean() && !v.is_null())
                {
                    return Err(ConfError::invalid(Problem::CapabilityNotABool(
                        name.clone(),
                    )));
                }
            }
            Some(other) => {
                return Err(ConfError::invalid(Problem::CapabilitiesType(json_kind(
                    other,
                ))))
            }
        }
        Ok(PluginConf { plugin_type, raw })
    }

    /// Parses one plugin object from JSON bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfError> {
        match gojson::parse(bytes) {
            Ok(Value::Object(map)) => Self::from_map(map),
            Ok(other) => Err(ConfError::invalid(Problem::PluginConfNotAnObject(
                json_kind(&other),
            ))),
            Err(e) => Err(ConfError::invalid(Problem::PluginJson(e))),
        }
    }

    /// The plugin-level `name`, if any (only used in error messages; the list name wins).
    pub fn name(&self) -> Option<&str> {
        gojson::get(&self.raw, "name").and_then(Value::as_str)
    }

    /// Capabilities enabled (`true`) in this plugin's `capabilities` object.
    pub fn enabled_capabilities(&self) -> impl Iterator<Item = &str> {
        gojson::get(&self.raw, "capabilities")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|caps| caps.iter())
            .filter(|(_, enabled)| enabled.as_bool() == Some(true))
            .map(|(name, _)| name.as_str())
    }

    /// `type="bridge" name="x"` as in libcni error messages.
    pub fn description(&self) -> String {
        match self.name() {
            Some(name) if !name.is_empty() => {
                format!("type={:?} name={:?}", self.plugin_type, name)
            }
            _ => format!("type={:?}", self.plugin_type),
        }
    }
}

/// A network configuration list (`.conflist`, or an up-converted `.conf`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    /// The selected version: `cniVersion`, or the highest supported entry of `cniVersions`.
    /// Empty when the file declares none (plugins then treat it as 0.1.0).
    pub cni_version: String,
    /// `cniVersions` as written (all entries, including unsupported ones).
    pub cni_versions: Vec<String>,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    /// Inlined plugins followed by those loaded from `<dir>/<name>/*.conf`.
    pub plugins: Vec<PluginConf>,
    /// The bytes the list was parsed from (stored base64-encoded in the result cache).
    pub bytes: Vec<u8>,
}

impl NetworkConfigList {
    /// Parses a configuration list. A list without a `plugins` key is accepted (its plugins
    /// may come from a sub-directory, see [`load_file`]) unless `loadOnlyInlinedPlugins` is set.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConfError> {
        let raw = match gojson::parse(bytes) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(ConfError::invalid(Problem::ListNotAnObject(json_kind(
                    &other,
                ))))
            }
            Err(e) => return Err(ConfError::invalid(Problem::ListJson(e))),
        };

        let name = match raw.get("name") {
            Some(Value::String(n)) => n.clone(),
            None => return Err(ConfError::invalid(Problem::NoName)),
            Some(other) => return Err(ConfError::invalid(Problem::NameType(json_kind(other)))),
        };

        let mut cni_version = match raw.get("cniVersion") {
            None => String::new(),
            Some(Value::String(v)) => v.clone(),
            Some(other) => return Err(ConfError::invalid(Problem::VersionType(json_kind(other)))),
        };

        let cni_versions = match raw.get("cniVersions") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut versions = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(v) => versions.push(v.clone()),
                        other => {
                            return Err(ConfError::invalid(Problem::VersionsEntryType {
                                index: i,
                                kind: json_kind(other),
                            }))
                        }
                    }
                }
                versions
            }
            Some(other) => return Err(ConfError::invalid(Problem::VersionsType(json_kind(other)))),
        };
        if raw.contains_key("cniVersions") {
            cni_version = select_version(&cni_version, &cni_versions)?;
        }

        let disable_check = read_bool(&raw, "disableCheck")?;
        let disable_gc = read_bool(&raw, "disableGC")?;
        let load_only_inlined_plugins = read_bool(&raw, "loadOnlyInlinedPlugins")?;

        let plugins = match raw.get("plugins") {
            None if load_only_inlined_plugins => {
                return Err(ConfError::invalid(Problem::OnlyInlinedWithoutPlugins))
            }
            None => Vec::new(),
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(ConfError::invalid(Problem::NoPluginsInList));
                }
                let mut plugins = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let parsed = match item {
                        Value::Object(map) => PluginConf::from_map(map.clone()),
                        other => Err(ConfError::invalid(Problem::PluginNotAnObject(json_kind(
                            other,
                        )))),
                    };
                    match parsed {
                        Ok(p) => plugins.push(p),
                        Err(e) => {
                            return Err(ConfError::invalid(Problem::Plugin {
                                index: i,
                                cause: Box::new(e),
                            }))
                        }
                    }
                }
                plugins
            }
            Some(other) => return Err(ConfError::invalid(Problem::PluginsType(json_kind(other)))),
        };

        Ok(NetworkConfigList {
            name,
            cni_version,
            cni_versions,
            disable_check,
            disable_gc,
            load_only_inlined_plugins,
            plugins,
            bytes: bytes.to_vec(),
        })
    }

    /// Up-converts a single-plugin configuration (`.conf`) to a one-plugin list
    /// `{"name", "cniVersion", "plugins": [conf]}` (libcni `ConfListFromConf`).
    pub fn from_plugin_conf(conf: &PluginConf) -> Result<Self, ConfError> {
        let name = conf.name().unwrap_or_default().to_string();
        let version = conf
            .raw
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut list = Map::new();
        list.insert("name".into(), Value::String(name));
        list.insert("cniVersion".into(), Value::String(version));
        list.insert(
            "plugins".into(),
            Value::Array(vec![Value::Object(conf.raw.clone())]),
        );
        let bytes = serde_json::to_vec(&Value::Object(list))
            .map_err(|e| ConfError::invalid(Problem::Serialize(e)))?;
        Self::from_bytes(&bytes)
    }

    /// Capabilities enabled by any plugin of the list (deduplicated, in plugin order).
    pub fn capabilities(&self) -> Vec<String> {
        let mut caps: Vec<String> = Vec::new();
        for cap in self
            .plugins
            .iter()
            .flat_map(PluginConf::enabled_capabilities)
        {
            if !caps.iter().any(|c| c == cap) {
                caps.push(cap.to_string());
            }
        }
        caps
    }
}

/// How the default network (the alphabetically first configuration file) is chosen when some
/// files are invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultPolicy {
    /// containerd (go-cni): the first file is the default; if it is invalid, that is an error.
    FailOnInvalid,
    /// kubelet/ocicni: invalid files are skipped; the first valid one is the default.
    SkipInvalid,
}

impl std::str::FromStr for DefaultPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fail-on-invalid" => Ok(DefaultPolicy::FailOnInvalid),
            "skip-invalid" => Ok(DefaultPolicy::SkipInvalid),
            other => Err(format!(
                "unknown default-network policy {other:?} (expected \"fail-on-invalid\" or \"skip-invalid\")"
            )),
        }
    }
}

/// One configuration file of a directory and the outcome of loading it.
#[derive(Debug)]
pub struct ConfFileEntry {
    pub path: PathBuf,
    pub result: Result<NetworkConfigList, ConfError>,
}

/// Configuration files of `dir` with one of `extensions` (without dot), sorted by file name.
/// Non-recursive; directories are skipped; a missing directory yields an empty list.
pub fn conf_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>, ConfError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        // Follow symlinks: a link to a directory is skipped like a directory.
        if path.is_dir() {
            continue;
        }
        let matches = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|ext| extensions.contains(&ext));
        if matches {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads a configuration file, refusing non-regular files and files over the size cap.
pub fn read_conf_file(path: &Path) -> Result<Vec<u8>, ConfError> {
    let io_err = |source| ConfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(path).map_err(io_err)?;
    if !meta.is_file() {
        return Err(ConfError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > MAX_CONF_FILE_SIZE {
        return Err(ConfError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    let file = fs::File::open(path).map_err(io_err)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // Bounded read: the file may grow between stat and read.
    file.take(MAX_CONF_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_CONF_FILE_SIZE {
        return Err(ConfError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Plugin objects from `<dir>/<network>/*.conf`, sorted by file name.
pub fn load_subdir_plugins(dir: &Path, network: &str) -> Result<Vec<PluginConf>, ConfError> {
    // A name with a path separator must not escape the configuration directory.
    if network.is_empty() || network.contains('/') || network == "." || network == ".." {
        return Ok(Vec::new());
    }
    let sub = dir.join(network);
    let mut plugins = Vec::new();
    for file in conf_files(&sub, &["conf"])? {
        let bytes = read_conf_file(&file)?;
        plugins.push(PluginConf::from_bytes(&bytes).map_err(|e| e.in_file(&file))?);
    }
    Ok(plugins)
}

/// Loads a `.conflist` file, appending sub-directory plugins unless `loadOnlyInlinedPlugins`.
pub fn load_conflist_file(path: &Path) -> Result<NetworkConfigList, ConfError> {
    let bytes = read_conf_file(path)?;
    let mut list = NetworkConfigList::from_bytes(&bytes).map_err(|e| e.in_file(path))?;
    if !list.load_only_inlined_plugins {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        list.plugins.extend(load_subdir_plugins(dir, &list.name)?);
    }
    if list.plugins.is_empty() {
        return Err(ConfError::Invalid {
            path: Some(path.to_path_buf()),
            problem: Problem::NoPluginConfigs,
        });
    }
    Ok(list)
}

/// Loads a deprecated single-plugin file (`.conf`/`.json`) as a one-plugin list.
pub fn load_single_conf_file(path: &Path) -> Result<NetworkConfigList, ConfError> {
    let bytes = read_conf_file(path)?;
    let conf = PluginConf::from_bytes(&bytes).map_err(|e| e.in_file(path))?;
    NetworkConfigList::from_plugin_conf(&conf).map_err(|e| e.in_file(path))
}

/// Loads any configuration file, choosing the format from its extension.
pub fn load_file(path: &Path) -> Result<NetworkConfigList, ConfError> {
    if path.extension().and_then(|e| e.to_str()) == Some("conflist") {
        load_conflist_file(path)
    } else {
        load_single_conf_file(path)
    }
}

/// Loads the network named `name` from `dir` (libcni `LoadConfList`/`LoadNetworkConf`):
/// `.conflist` files first in sorted order (a broken file before the match aborts the lookup,
/// as in libcni), then `.conf`/`.json` files, up-converted to a list.
pub fn load_network(dir: &Path, name: &str) -> Result<NetworkConfigList, ConfError> {
    let lists = conf_files(dir, &["conflist"])?;
    for file in &lists {
        let list = load_conflist_file(file)?;
        if list.name == name {
            return Ok(list);
        }
    }
    let singles = conf_files(dir, &["conf", "json"])?;
    if singles.is_empty() {
        if lists.is_empty() {
            return Err(ConfError::NoConfigsFound {
                dir: dir.to_path_buf(),
            });
        }
        return Err(ConfError::NotFound {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        });
    }
    for file in &singles {
        let bytes = read_conf_file(file)?;
        let conf = PluginConf::from_bytes(&bytes).map_err(|e| e.in_file(file))?;
        if conf.name() == Some(name) {
            return NetworkConfigList::from_plugin_conf(&conf).map_err(|e| e.in_file(file));
        }
    }
    Err(ConfError::NotFound {
        dir: dir.to_path_buf(),
        name: name.to_string(),
    })
}

/// Every configuration file of `dir` (`.conf`, `.conflist`, `.json`) in default-network order
/// (sorted by file name), each with its parsed list or the reason it is invalid.
pub fn list_dir(dir: &Path) -> Result<Vec<ConfFileEntry>, ConfError> {
    Ok(conf_files(dir, CONF_EXTENSIONS)?
        .into_iter()
        .map(|path| {
            let result = load_file(&path);
            ConfFileEntry { path, result }
        })
        .collect())
}

/// Index in `entries` (as returned by [`list_dir`]) of the default network under `policy`.
pub fn default_index(entries: &[ConfFileEntry], policy: DefaultPolicy) -> Option<usize> {
    match policy {
        DefaultPolicy::FailOnInvalid => entries.first().filter(|e| e.result.is_ok()).map(|_| 0),
        DefaultPolicy::SkipInvalid => entries.iter().position(|e| e.result.is_ok()),
    }
}

/// The default network of `dir`: the alphabetically first configuration file, subject to
/// `policy` when files are invalid.
pub fn load_default(dir: &Path, policy: DefaultPolicy) -> Result<NetworkConfigList, ConfError> {
    let files = conf_files(dir, CONF_EXTENSIONS)?;
    if files.is_empty() {
        return Err(ConfError::NoConfigsFound {
            dir: dir.to_path_buf(),
        });
    }
    let mut first_error = None;
    for file in &files {
        match load_file(file) {
            Ok(list) => return Ok(list),
            Err(e) if policy == DefaultPolicy::FailOnInvalid => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    // SkipInvalid and nothing valid: report why the first file was rejected.
    Err(first_error.unwrap_or(ConfError::NoConfigsFound {
        dir: dir.to_path_buf(),
    }))
}

/// Overwrites `values` into a copy of `plugin` (libcni `InjectConf`): empty keys and `null`
/// values are rejected.
pub fn inject_conf(
    plugin: &Map<String, Value>,
    values: impl IntoIterator<Item = (String, Value)>,
) -> Result<Map<String, Value>, ConfError> {
    let mut out = plugin.clone();
    for (key, value) in values {
        if key.is_empty() {
            return Err(ConfError::Inject("keys cannot be empty".into()));
        }
        if value.is_null() {
            return Err(ConfError::Inject(format!(
                "key '{key}' value must not be nil"
            )));
        }
        // Last in document order, so it wins over any case variant under Go's decoding.
        out.shift_remove(&key);
        out.insert(key, value);
    }
    Ok(out)
}

/// The `runtimeConfig` for a plugin: capability args whose capability the plugin enables.
/// `None` when nothing applies (the key is then omitted). Empty capability names and `null`
/// values are rejected.
pub fn runtime_config_for(
    plugin: &PluginConf,
    capability_args: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>, ConfError> {
    let mut rc = Map::new();
    for cap in plugin.enabled_capabilities() {
        if let Some(value) = capability_args.get(cap) {
            if cap.is_empty() {
                return Err(ConfError::Inject("keys cannot be empty".into()));
            }
            if value.is_null() {
                return Err(ConfError::Inject(format!(
                    "capability '{cap}' value must not be nil"
                )));
            }
            rc.insert(cap.to_string(), value.clone());
        }
    }
    Ok(if rc.is_empty() { None } else { Some(rc) })
}

/// Builds the stdin config one plugin receives for ADD/CHECK/DEL (libcni `buildOneConfig`):
/// the plugin object with `name` and `cniVersion` of the list, `prevResult` when given, and
/// `runtimeConfig` from the capability args.
pub fn build_plugin_config(
    list: &NetworkConfigList,
    plugin: &PluginConf,
    prev_result: Option<&Value>,
    capability_args: Option<&Map<String, Value>>,
) -> Result<Map<String, Value>, ConfError> {
    let mut inject = vec![
        ("name".to_string(), Value::String(list.name.clone())),
        (
            "cniVersion".to_string(),
            Value::String(list.cni_version.clone()),
        ),
    ];
    if let Some(prev) = prev_result {
        inject.push(("prevResult".to_string(), prev.clone()));
    }
    let mut conf = inject_conf(&plugin.raw, inject)?;
    if let Some(caps) = capability_args {
        if let Some(rc) = runtime_config_for(plugin, caps)? {
            conf.shift_remove("runtimeConfig");
            conf.insert("runtimeConfig".into(), Value::Object(rc));
        }
    }
    Ok(conf)
}

/// Parses a spec version `X[.Y[.Z]]`; the empty string means 0.1.0 (as in libcni).
pub(crate) fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    if v.is_empty() {
        return Some((0, 1, 0));
    }
    let mut parts = [0u64; 3];
    for (i, part) in v.split('.').enumerate() {
        if i == 3 || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parts[i] = part.parse().ok()?;
    }
    Some((parts[0], parts[1], parts[2]))
}

/// Compares two spec versions; `None` if either is malformed.
pub(crate) fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    Some(parse_version(a)?.cmp(&parse_version(b)?))
}

/// `v >= min`; malformed versions are never "at least" anything.
pub(crate) fn version_at_least(v: &str, min: &str) -> bool {
    matches!(
        compare_versions(v, min),
        Some(Ordering::Greater | Ordering::Equal)
    )
}

/// Picks the highest version among `cniVersions` ∪ {`cniVersion`} that is ≤ 1.1.0.
fn select_version(cni_version: &str, cni_versions: &[String]) -> Result<String, ConfError> {
    let too_new = |v: &str| -> Result<bool, ConfError> {
        compare_versions(v, LIBCNI_SPEC_VERSION)
            .map(|o| o == Ordering::Greater)
            .ok_or_else(|| ConfError::invalid(Problem::Version(v.to_string())))
    };
    let mut best: Option<&str> = None;
    let candidates = cni_versions
        .iter()
        .map(String::as_str)
        .chain((!cni_version.is_empty()).then_some(cni_version));
    for v in candidates {
        if too_new(v)? {
            continue;
        }
        let better = match best {
            None => true,
            Some(b) => compare_versions(v, b) == Some(Ordering::Greater),
        };
        if better {
            best = Some(v);
        }
    }
    Ok(best.unwrap_or(cni_version).to_string())
}

/// Reads a boolean that may also be written as the string "true"/"false" (any case).
fn read_bool(raw: &Map<String, Value>, key: &str) -> Result<bool, ConfError> {
    match raw.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(ConfError::invalid(Problem::BoolValue {
                key: key.to_string(),
                value: s.clone(),
            })),
        },
        Some(other) => Err(ConfError::invalid(Problem::BoolType {
            key: key.to_string(),
            kind: json_kind(other),
        })),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use crate::error::CniError;

    #[test]
    fn codes_and_texts() {
        let e = CniError::from(ConfError::NotFound {
            dir: "/etc/cni/net.d".into(),
            name: "pods".into(),
        });
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                7,
                "no net configuration with name \"pods\" in /etc/cni/net.d"
            )
        );
        let e = CniError::from(ConfError::Invalid {
            path: Some("/etc/cni/net.d/10.conf".into()),
            problem: Problem::MissingType,
        });
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                7,
                "/etc/cni/net.d/10.conf: error parsing configuration: missing 'type'"
            )
        );
        let e = CniError::from(ConfError::invalid(Problem::Plugin {
            index: 1,
            cause: Box::new(ConfError::invalid(Problem::TypeNotAString("number"))),
        }));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                7,
                "failed to parse plugin config 1: error parsing configuration: 'type' must be a string, got number"
            )
        );
        let e = CniError::from(ConfError::invalid(Problem::BoolValue {
            key: "disableCheck".into(),
            value: "yes".into(),
        }));
        assert_eq!(
            e.msg,
            "error parsing configuration list: invalid value \"yes\" for disableCheck"
        );
        let e = CniError::from(ConfError::Io {
            path: "/etc/cni/net.d".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(e.code, 5);
        assert!(
            e.msg.starts_with("error reading /etc/cni/net.d: "),
            "{}",
            e.msg
        );
        assert_eq!(
            CniError::from(ConfError::Inject("keys cannot be empty".into())).code,
            7
        );
    }
}
