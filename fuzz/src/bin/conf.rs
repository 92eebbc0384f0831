//! Network configuration files as the runtime side loads them (libcni `conf`): a `.conflist`
//! (`NetworkConfigList::from_bytes`) or a single-plugin `.conf` up-converted to a list, then
//! each plugin's stdin built from it (`build_plugin_config`, capabilities injected).
//! Invariants: a plugin config names the list's network and version as Go reads them, its
//! `runtimeConfig` holds only capabilities the plugin enables, and it survives a JSON round
//! trip; refusals are well-formed CNI errors.
#![no_main]

use ferrocni_fuzz::{check_error, check_json_round_trip};
use libcni::conf::{build_plugin_config, runtime_config_for, NetworkConfigList, PluginConf};
use libcni::error::CniError;
use libcni::gojson;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

fuzz_target!(|data: &[u8]| {
    let list = match NetworkConfigList::from_bytes(data) {
        Ok(list) => list,
        Err(list_error) => {
            check_error(&CniError::from(list_error));
            match PluginConf::from_bytes(data).and_then(|c| NetworkConfigList::from_plugin_conf(&c))
            {
                Ok(list) => list,
                Err(e) => return check_error(&CniError::from(e)),
            }
        }
    };
    let caps: Map<String, Value> = match json!({
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000, "ingressBurst": 100},
        "ips": ["10.1.2.3/24"],
        "mac": "c2:11:22:33:44:55",
    }) {
        Value::Object(m) => m,
        _ => unreachable!("a literal object"),
    };
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.3/24"}]});
    for plugin in &list.plugins {
        assert!(!plugin.plugin_type.is_empty());
        let _ = plugin.description();
        let conf = match build_plugin_config(&list, plugin, Some(&prev), Some(&caps)) {
            Ok(c) => c,
            Err(e) => {
                check_error(&CniError::from(e));
                continue;
            }
        };
        assert_eq!(
            gojson::get(&conf, "name"),
            Some(&Value::String(list.name.clone()))
        );
        assert_eq!(
            gojson::get(&conf, "cniVersion"),
            Some(&Value::String(list.cni_version.clone()))
        );
        if let Ok(Some(rc)) = runtime_config_for(plugin, &caps) {
            let enabled: Vec<&str> = plugin.enabled_capabilities().collect();
            assert!(rc.keys().all(|k| enabled.contains(&k.as_str())));
            assert_eq!(conf.get("runtimeConfig"), Some(&Value::Object(rc)));
        }
        check_json_round_trip(&Value::Object(conf));
    }
    let _ = list.capabilities();
});
