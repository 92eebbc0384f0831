//! Network list operations for runtimes (Go libcni `CNIConfig`): ADD, CHECK, DEL, GC and
//! STATUS over a [`NetworkConfigList`], with the result cache of [`crate::cache`].
//!
//! * ADD runs the plugins in order, each one's result becoming the next one's `prevResult`,
//!   then caches the final result (a cache write failure fails the ADD).
//! * CHECK (≥ 0.4.0) runs the plugins in order with the cached result as `prevResult`.
//! * DEL runs the plugins in reverse with the cached result (≥ 0.4.0); an unreadable cache
//!   entry is dropped instead of blocking the DEL; the entry is removed after success.
//! * GC DELs every cached attachment of the network that is not in the valid set, then (≥ 1.1.0)
//!   sends GC to every plugin; all errors are collected.
//! * STATUS (≥ 1.1.0) asks every plugin in order and returns the first error.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::attach_lock::AttachmentLock;
use crate::cache::{CacheEntry, CachedRecord, ResultCache};
use crate::conf::{build_plugin_config, inject_conf, version_at_least};
use crate::conf::{NetworkConfigList, PluginConf};
use crate::error::CniError;
use crate::invoke::{self, ExecArgs, PluginInfo};
use crate::result::{convert, CniResult};
use crate::{gojson, validate};

/// Everything about one attachment except the network configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    /// Path of the network namespace (may be empty for DEL).
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS pairs.
    pub args: Vec<(String, String)>,
    /// Capability arguments; only those a plugin enables reach its `runtimeConfig`.
    pub capability_args: Map<String, Value>,
}

/// An attachment that GC must keep.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GcAttachment {
    pub container_id: String,
    pub ifname: String,
}

/// A runtime's view of CNI: where plugins live and where results are cached.
#[derive(Debug, Clone)]
pub struct CniConfig {
    /// Directories searched for plugin binaries (also passed to plugins as CNI_PATH).
    pub plugin_paths: Vec<PathBuf>,
    /// Cache root; results go to `<cache_dir>/results`.
    pub cache_dir: PathBuf,
}

impl CniConfig {
    pub fn new(plugin_paths: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        CniConfig {
            plugin_paths,
            cache_dir: cache_dir.into(),
        }
    }

    fn cache(&self) -> ResultCache {
        ResultCache::new(&self.cache_dir)
    }

    fn cni_path(&self) -> String {
        self.plugin_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    fn exec_args(&self, command: &str, rt: &RuntimeConf) -> ExecArgs {
        ExecArgs {
            command: command.into(),
            container_id: rt.container_id.clone(),
            netns: rt.netns.clone(),
            plugin_args: rt.args.clone(),
            ifname: rt.ifname.clone(),
            path: self.cni_path(),
        }
    }

    fn find(&self, plugin: &PluginConf) -> Result<PathBuf, CniError> {
        invoke::find_in_path(&plugin.plugin_type, &self.plugin_paths)
    }

    /// ADD: runs the chain and returns the final result (in the version the last plugin
    /// printed it), after caching it.
    pub fn add_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Value, CniError> {
        if list.plugins.is_empty() {
            return Err(CniError::invalid_config(format!(
                "network {:?} has no plugins",
                list.name
            )));
        }
        let _lock = self.lock(list, rt);
        let mut prev: Option<Value> = None;
        for plugin in &list.plugins {
            let result = self
                .add_one(list, plugin, prev.as_ref(), rt)
                .map_err(|e| wrap_plugin_error(e, plugin, "add"))?;
            prev = Some(result);
        }
        let result = prev.unwrap_or(Value::Null);
        let entry = CacheEntry {
            container_id: rt.container_id.clone(),
            network: list.name.clone(),
            ifname: rt.ifname.clone(),
            netns: rt.netns.clone(),
            config: list.bytes.clone(),
            cni_args: rt.args.clone(),
            capability_args: rt.capability_args.clone(),
            result: Some(result.clone()),
        };
        if let Err(e) = self.cache().write(&entry) {
            // The runtime gets an error and no result: it may never DEL what every plugin
            // just set up. Undo it now, with the result as prevResult, as a DEL would.
            if let Err(undo) = self.del_chain(list, Some(&result), rt) {
                eprintln!("libcni: undoing the ADD whose result could not be cached: {undo}");
            }
            let e = CniError::from(e);
            return Err(CniError::new(
                e.code,
                format!(
                    "failed to set network {:?} cached result: {}",
                    list.name, e.msg
                ),
                e.details,
            ));
        }
        Ok(result)
    }

    fn add_one(
        &self,
        list: &NetworkConfigList,
        plugin: &PluginConf,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<Value, CniError> {
        let binary = self.find(plugin)?;
        validate::container_id(&rt.container_id)?;
        validate::network_name(&list.name)?;
        validate::interface_name(&rt.ifname)?;
        let stdin = request_bytes(list, plugin, prev, rt)?;
        let env = self.exec_args("ADD", rt).env();
        let raw = invoke::exec_plugin_with_result(&binary, &stdin, &env)?;
        normalize_result(&raw)
    }

    /// The Go libcni's deprecated single-plugin ADD (`AddNetwork`), for runtimes that still
    /// hold `.conf`-style configurations: the plugin runs as a one-plugin list, and its cache
    /// entry holds the plugin's own configuration, as the Go libcni caches it.
    pub fn add_network(&self, plugin: &PluginConf, rt: &RuntimeConf) -> Result<Value, CniError> {
        self.add_network_list(&single_plugin_list(plugin)?, rt)
    }

    /// Single-plugin CHECK (`CheckNetwork`), see [`CniConfig::add_network`].
    pub fn check_network(&self, plugin: &PluginConf, rt: &RuntimeConf) -> Result<(), CniError> {
        self.check_network_list(&single_plugin_list(plugin)?, rt)
    }

    /// Single-plugin DEL (`DelNetwork`), see [`CniConfig::add_network`].
    pub fn del_network(&self, plugin: &PluginConf, rt: &RuntimeConf) -> Result<(), CniError> {
        self.del_network_list(&single_plugin_list(plugin)?, rt)
    }

    /// CHECK: every plugin in order, with the cached ADD result as `prevResult`.
    pub fn check_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        if !version_at_least(&list.cni_version, "0.4.0") {
            return Err(CniError::incompatible_version(format!(
                "configuration version {:?} does not support the CHECK command",
                list.cni_version
            )));
        }
        if list.disable_check {
            return Ok(());
        }
        let _lock = self.lock(list, rt);
        let cached = self.network_list_cached_result(list, rt).map_err(|e| {
            CniError::new(
                e.code,
                format!(
                    "failed to get network {:?} cached result: {}",
                    list.name, e.msg
                ),
                e.details,
            )
        })?;
        for plugin in &list.plugins {
            self.run_without_result("CHECK", list, plugin, cached.as_ref(), rt)
                .map_err(|e| wrap_plugin_error(e, plugin, "check"))?;
        }
        Ok(())
    }

    /// DEL: every plugin in reverse order. Never blocked by a corrupt cache entry; the entry is
    /// removed once every plugin succeeded (kept on failure so the DEL can be retried).
    pub fn del_network_list(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        let _lock = self.lock(list, rt);
        let cached = if version_at_least(&list.cni_version, "0.4.0") {
            match self.network_list_cached_result(list, rt) {
                Ok(result) => result,
                Err(_) => {
                    // Unreadable or unconvertible: drop it so it cannot block this DEL again.
                    let _ = self
                        .cache()
                        .remove(&list.name, &rt.container_id, &rt.ifname);
                    None
                }
            }
        } else {
            None
        };
        self.del_chain(list, cached.as_ref(), rt)?;
        let _ = self
            .cache()
            .remove(&list.name, &rt.container_id, &rt.ifname);
        Ok(())
    }

    /// Every plugin's DEL, in reverse order, stopping at the first failure.
    fn del_chain(
        &self,
        list: &NetworkConfigList,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        for plugin in list.plugins.iter().rev() {
            self.run_without_result("DEL", list, plugin, prev, rt)
                .map_err(|e| wrap_plugin_error(e, plugin, "delete"))?;
        }
        Ok(())
    }

    /// The attachment's lock, held for a whole list operation ([`crate::attach_lock`]).
    fn lock(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> AttachmentLock {
        AttachmentLock::acquire(&self.cache_dir, &list.name, &rt.container_id, &rt.ifname)
    }

    fn run_without_result(
        &self,
        command: &str,
        list: &NetworkConfigList,
        plugin: &PluginConf,
        prev: Option<&Value>,
        rt: &RuntimeConf,
    ) -> Result<(), CniError> {
        let binary = self.find(plugin)?;
        let stdin = request_bytes(list, plugin, prev, rt)?;
        let env = self.exec_args(command, rt).env();
        invoke::exec_plugin_without_result(&binary, &stdin, &env)
    }

    /// GC: DELs every cached attachment of this network not in `valid` (all of them when
    /// `valid` is `None`), then, for lists ≥ 1.1.0, sends GC to every plugin with
    /// `cni.dev/valid-attachments` (and the legacy `cni.dev/attachments`). Continues on
    /// errors and reports all of them.
    pub fn gc_network_list(
        &self,
        list: &NetworkConfigList,
        valid: Option<&[GcAttachment]>,
    ) -> Result<(), CniError> {
        if list.disable_gc {
            return Ok(());
        }
        let mut errors: Vec<CniError> = Vec::new();

        match self.cache().list_attachments(Some(&list.name), None) {
            Ok(attachments) => {
                for att in attachments {
                    let keep = valid.is_some_and(|v| {
                        v.iter()
                            .any(|a| a.container_id == att.container_id && a.ifname == att.ifname)
                    });
                    if keep {
                        continue;
                    }
                    let rt = RuntimeConf {
                        container_id: att.container_id.clone(),
                        netns: att.netns.clone(),
                        ifname: att.ifname.clone(),
                        args: att.cni_args.clone(),
                        capability_args: att.capability_args.clone(),
                    };
                    if let Err(e) = self.del_network_list(list, &rt) {
                        errors.push(CniError::new(
                            e.code,
                            format!(
                                "failed to delete stale attachment {} {}: {}",
                                rt.container_id, rt.ifname, e.msg
                            ),
                            e.details,
                        ));
                    }
                }
            }
            Err(e) => errors.push(CniError::from(e)),
        }

        if version_at_least(&list.cni_version, "1.1.0") {
            let mut inject = vec![
                ("name".to_string(), Value::String(list.name.clone())),
                (
                    "cniVersion".to_string(),
                    Value::String(list.cni_version.clone()),
                ),
            ];
            if let Some(valid) = valid {
                let items: Vec<Value> = valid
                    .iter()
                    .map(|a| serde_json::json!({"containerID": a.container_id, "ifname": a.ifname}))
                    .collect();
                inject.push((
                    "cni.dev/valid-attachments".to_string(),
                    Value::Array(items.clone()),
                ));
                inject.push(("cni.dev/attachments".to_string(), Value::Array(items)));
            }
            let env = self.exec_args("GC", &RuntimeConf::default()).env();
            for plugin in &list.plugins {
                let outcome = inject_conf(&plugin.raw, inject.clone())
                    .map_err(CniError::from)
                    .and_then(|conf| {
                        let binary = self.find(plugin)?;
                        invoke::exec_plugin_without_result(&binary, &to_bytes(&conf)?, &env)
                    });
                if let Err(e) = outcome {
                    errors.push(CniError::new(
                        e.code,
                        format!("failed to GC plugin {}: {}", plugin.plugin_type, e.msg),
                        e.details,
                    ));
                }
            }
        }
        join_errors(errors)
    }

    /// STATUS: for lists ≥ 1.1.0, every plugin in order; the first error is returned as is
    /// (so its code, e.g. 50, reaches the caller). Older lists are always ready.
    pub fn get_status_network_list(&self, list: &NetworkConfigList) -> Result<(), CniError> {
        if !version_at_least(&list.cni_version, "1.1.0") {
            return Ok(());
        }
        let inject = [
            ("name".to_string(), Value::String(list.name.clone())),
            (
                "cniVersion".to_string(),
                Value::String(list.cni_version.clone()),
            ),
        ];
        let env = self.exec_args("STATUS", &RuntimeConf::default()).env();
        for plugin in &list.plugins {
            let conf = inject_conf(&plugin.raw, inject.clone()).map_err(CniError::from)?;
            let binary = self.find(plugin)?;
            invoke::exec_plugin_without_result(&binary, &to_bytes(&conf)?, &env)?;
        }
        Ok(())
    }

    /// The cached ADD result of an attachment, converted to the list's version.
    pub fn network_list_cached_result(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<Value>, CniError> {
        let Some(result) = self
            .cache()
            .read_result(&list.name, &rt.container_id, &rt.ifname)?
        else {
            return Ok(None);
        };
        convert(&result, &list.cni_version).map(Some).map_err(|e| {
            CniError::new(
                e.code,
                format!(
                    "failed to convert cached result to config version {:?}: {}",
                    list.cni_version, e.msg
                ),
                e.details,
            )
        })
    }

    /// The cached configuration bytes of an attachment and `rt` updated with the cached
    /// CNI_ARGS and capability args (Go `GetNetworkListCachedConfig`).
    pub fn network_list_cached_config(
        &self,
        list: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<(Vec<u8>, RuntimeConf)>, CniError> {
        match self
            .cache()
            .read(&list.name, &rt.container_id, &rt.ifname)?
        {
            None => Ok(None),
            Some(CachedRecord::Legacy(_)) => Err(CniError::decode(format!(
                "read cached network {:?} config has wrong kind",
                list.name
            ))),
            Some(CachedRecord::V1(entry)) => {
                let mut new_rt = rt.clone();
                if !entry.cni_args.is_empty() {
                    new_rt.args = entry.cni_args.clone();
                }
                new_rt.capability_args = entry.capability_args.clone();
                Ok(Some((entry.config.clone(), new_rt)))
            }
        }
    }

    /// Cached attachments of every network, optionally of one container only.
    pub fn cached_attachments(
        &self,
        container_id: Option<&str>,
    ) -> Result<Vec<CacheEntry>, CniError> {
        Ok(self.cache().list_attachments(None, container_id)?)
    }

    /// Asks plugin `plugin_type` which versions it supports.
    pub fn get_version_info(&self, plugin_type: &str) -> Result<PluginInfo, CniError> {
        let binary = invoke::find_in_path(plugin_type, &self.plugin_paths)?;
        invoke::get_version_info(&binary)
    }

    /// Checks that every plugin exists and supports the list's version; returns the union of
    /// enabled capabilities (Go `ValidateNetworkList`).
    pub fn validate_network_list(&self, list: &NetworkConfigList) -> Result<Vec<String>, CniError> {
        let wanted = if list.cni_version.is_empty() {
            "0.1.0"
        } else {
            list.cni_version.as_str()
        };
        let mut errors = Vec::new();
        for plugin in &list.plugins {
            match self.get_version_info(&plugin.plugin_type) {
                Ok(info) if info.supported_versions.iter().any(|v| v == wanted) => {}
                Ok(_) => errors.push(CniError::incompatible_version(format!(
                    "plugin {} does not support config version {wanted:?}",
                    plugin.plugin_type
                ))),
                Err(e) => errors.push(e),
            }
        }
        join_errors(errors)?;
        Ok(list.capabilities())
    }
}

/// The JSON a plugin receives for ADD/CHECK/DEL.
fn request_bytes(
    list: &NetworkConfigList,
    plugin: &PluginConf,
    prev: Option<&Value>,
    rt: &RuntimeConf,
) -> Result<Vec<u8>, CniError> {
    let conf = build_plugin_config(list, plugin, prev, Some(&rt.capability_args))?;
    to_bytes(&conf)
}

/// A single plugin configuration as a one-plugin list whose bytes are the plugin's own.
fn single_plugin_list(plugin: &PluginConf) -> Result<NetworkConfigList, CniError> {
    let mut list = NetworkConfigList::from_plugin_conf(plugin).map_err(CniError::from)?;
    list.bytes = to_bytes(&plugin.raw)?;
    Ok(list)
}

fn to_bytes(conf: &Map<String, Value>) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec(conf)
        .map_err(|e| CniError::internal(format!("cannot serialize plugin configuration: {e}")))
}

/// Validates a plugin's result and re-emits it in its own version (as libcni does by decoding
/// it into the typed result of that version).
fn normalize_result(raw: &Value) -> Result<Value, CniError> {
    let version = gojson::get_in(raw, "cniVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    CniResult::from_value(raw)?.to_value(&version)
}

/// `plugin type="bridge" name="x" failed (add): <msg>`, keeping the plugin's code.
fn wrap_plugin_error(e: CniError, plugin: &PluginConf, action: &str) -> CniError {
    CniError::new(
        e.code,
        format!(
            "plugin {} failed ({action}): {}",
            plugin.description(),
            e.msg
        ),
        e.details,
    )
}

/// One error for many: messages on separate lines, the first error's code.
fn join_errors(errors: Vec<CniError>) -> Result<(), CniError> {
    let Some(first) = errors.first() else {
        return Ok(());
    };
    if errors.len() == 1 {
        return Err(first.clone());
    }
    let msg = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    Err(CniError::new(first.code, msg, ""))
}

/// Default plugin directory list from a `CNI_PATH`-style string.
pub fn plugin_paths_from(list: &str) -> Vec<PathBuf> {
    invoke::split_path_list(list)
}

/// The default cache root, [`crate::cache::DEFAULT_CACHE_DIR`].
pub fn default_cache_dir() -> &'static Path {
    Path::new(crate::cache::DEFAULT_CACHE_DIR)
}

/// The container ID `cnitool` uses for a namespace path: `cnitool-` followed by the first 20
/// hex digits of the SHA-512 of the absolute, lexically cleaned path.
pub fn cnitool_container_id(netns_path: &str) -> String {
    use sha2::{Digest, Sha512};
    let abs = absolute_clean_path(netns_path);
    let digest = Sha512::digest(abs.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

/// Go's `filepath.Abs`: joins a relative path to the working directory, then removes `.`,
/// `..` and repeated separators lexically (symlinks are not resolved).
pub fn absolute_clean_path(path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        let cwd = std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "/".into());
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_cleaning_matches_go_filepath_abs() {
        assert_eq!(absolute_clean_path("/var/run/netns/x"), "/var/run/netns/x");
        assert_eq!(absolute_clean_path("//run/./netns//x/"), "/run/netns/x");
        assert_eq!(absolute_clean_path("/run/../../netns/x"), "/netns/x");
        assert_eq!(absolute_clean_path("/"), "/");
    }

    #[test]
    fn cnitool_container_id_is_sha512_prefix() {
        // printf %s /var/run/netns/testing | sha512sum | cut -c1-20
        assert_eq!(
            cnitool_container_id("/var/run/netns/testing"),
            "cnitool-77383ca0a0715733ca6f"
        );
        assert_eq!(
            cnitool_container_id("/run/netns/../netns/x"),
            "cnitool-55e2cecc95014b0f7fc4"
        );
    }
}
