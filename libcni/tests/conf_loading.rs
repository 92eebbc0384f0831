//! Configuration directory loading (libcni conf.go behaviour + default-network policies).

mod common;

use common::TempDir;
use libcni::conf::{
    build_plugin_config, default_index, inject_conf, list_dir, load_default, load_network,
    runtime_config_for, ConfError, DefaultPolicy, NetworkConfigList, PluginConf,
    MAX_CONF_FILE_SIZE,
};
use serde_json::{json, Map, Value};

fn conflist(name: &str, version: &str, types: &[&str]) -> String {
    let plugins: Vec<Value> = types.iter().map(|t| json!({"type": t})).collect();
    json!({"cniVersion": version, "name": name, "plugins": plugins}).to_string()
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn conflists_are_searched_first_then_conf_and_json() {
    let dir = TempDir::new("order");
    dir.write("30-b.conflist", conflist("b", "1.0.0", &["bridge"]));
    dir.write("20-a.conflist", conflist("a", "1.0.0", &["ptp", "portmap"]));
    dir.write(
        "05-c.conf",
        r#"{"cniVersion":"0.4.0","name":"c","type":"bridge","x":1}"#,
    );
    dir.write(
        "06-d.json",
        r#"{"cniVersion":"0.3.1","name":"d","type":"macvlan"}"#,
    );
    dir.write("README.md", "not a config");

    let a = load_network(dir.path(), "a").unwrap();
    assert_eq!(a.plugins.len(), 2);
    assert_eq!(a.plugins[1].plugin_type, "portmap");
    assert_eq!(a.cni_version, "1.0.0");

    let c = load_network(dir.path(), "c").unwrap();
    assert_eq!(c.name, "c");
    assert_eq!(c.cni_version, "0.4.0");
    assert_eq!(c.plugins.len(), 1);
    // Up-converted: the raw plugin keeps unknown keys.
    assert_eq!(c.plugins[0].raw["x"], json!(1));
    let bytes: Value = serde_json::from_slice(&c.bytes).unwrap();
    assert_eq!(bytes["name"], "c");
    assert_eq!(bytes["plugins"][0]["type"], "bridge");

    assert_eq!(
        load_network(dir.path(), "d").unwrap().plugins[0].plugin_type,
        "macvlan"
    );

    let err = load_network(dir.path(), "nope").unwrap_err();
    assert!(matches!(err, ConfError::NotFound { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "no net configuration with name \"nope\" in {}",
            dir.path().display()
        )
    );

    // Default = alphabetically first file of any kind.
    let names: Vec<String> = list_dir(dir.path())
        .unwrap()
        .iter()
        .map(|e| e.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["05-c.conf", "06-d.json", "20-a.conflist", "30-b.conflist"]
    );
    assert_eq!(
        load_default(dir.path(), DefaultPolicy::FailOnInvalid)
            .unwrap()
            .name,
        "c"
    );
}

#[test]
fn empty_or_missing_dir_has_no_configs() {
    let dir = TempDir::new("empty");
    assert!(matches!(
        load_network(dir.path(), "x").unwrap_err(),
        ConfError::NoConfigsFound { .. }
    ));
    assert!(matches!(
        load_network(&dir.join("missing"), "x").unwrap_err(),
        ConfError::NoConfigsFound { .. }
    ));
    assert!(matches!(
        load_default(dir.path(), DefaultPolicy::SkipInvalid).unwrap_err(),
        ConfError::NoConfigsFound { .. }
    ));
    // Only conflists, none matching: NotFound rather than NoConfigsFound.
    dir.write("10.conflist", conflist("a", "1.0.0", &["bridge"]));
    assert!(matches!(
        load_network(dir.path(), "x").unwrap_err(),
        ConfError::NotFound { .. }
    ));
}

#[test]
fn broken_earlier_conflist_aborts_lookup_like_libcni() {
    let dir = TempDir::new("broken");
    dir.write("10-broken.conflist", "{not json");
    dir.write("20-ok.conflist", conflist("ok", "1.0.0", &["bridge"]));
    let err = load_network(dir.path(), "ok").unwrap_err().to_string();
    assert!(err.contains("10-broken.conflist"), "{err}");
    assert!(err.contains("error parsing configuration list"), "{err}");
}

#[test]
fn default_network_policies() {
    let dir = TempDir::new("policy");
    dir.write(
        "00-bad.conflist",
        r#"{"name":"bad","cniVersion":"1.0.0","plugins":[]}"#,
    );
    dir.write("05-notype.conf", r#"{"name":"nt","cniVersion":"1.0.0"}"#);
    dir.write("10-good.conflist", conflist("good", "1.0.0", &["bridge"]));

    let err = load_default(dir.path(), DefaultPolicy::FailOnInvalid).unwrap_err();
    assert!(err.to_string().contains("no plugins in list"), "{err}");
    assert!(err.to_string().contains("00-bad.conflist"), "{err}");
    assert_eq!(
        load_default(dir.path(), DefaultPolicy::SkipInvalid)
            .unwrap()
            .name,
        "good"
    );

    let entries = list_dir(dir.path()).unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries[0].result.is_err());
    assert!(entries[1]
        .result
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("missing 'type'"));
    assert!(entries[2].result.is_ok());
    assert_eq!(default_index(&entries, DefaultPolicy::FailOnInvalid), None);
    assert_eq!(default_index(&entries, DefaultPolicy::SkipInvalid), Some(2));
    assert_eq!(
        "skip-invalid".parse::<DefaultPolicy>(),
        Ok(DefaultPolicy::SkipInvalid)
    );
    assert_eq!(
        "fail-on-invalid".parse::<DefaultPolicy>(),
        Ok(DefaultPolicy::FailOnInvalid)
    );
    assert!("other".parse::<DefaultPolicy>().is_err());
}

#[test]
fn subdirectory_plugins_and_load_only_inlined() {
    let dir = TempDir::new("subdir");
    dir.write("10-net.conflist", r#"{"cniVersion":"1.1.0","name":"net"}"#);
    dir.write(
        "net/20-second.conf",
        r#"{"type":"portmap","capabilities":{"portMappings":true}}"#,
    );
    dir.write("net/10-first.conf", r#"{"type":"bridge"}"#);
    dir.write("net/ignored.json", r#"{"type":"ignored"}"#);
    let list = load_network(dir.path(), "net").unwrap();
    let types: Vec<&str> = list
        .plugins
        .iter()
        .map(|p| p.plugin_type.as_str())
        .collect();
    assert_eq!(types, ["bridge", "portmap"]);

    dir.write(
        "20-inl.conflist",
        r#"{"cniVersion":"1.1.0","name":"inl","plugins":[{"type":"ptp"}]}"#,
    );
    dir.write("inl/10.conf", r#"{"type":"tuning"}"#);
    let types: Vec<String> = load_network(dir.path(), "inl")
        .unwrap()
        .plugins
        .into_iter()
        .map(|p| p.plugin_type)
        .collect();
    assert_eq!(types, ["ptp", "tuning"]);

    dir.write(
        "20-inl.conflist",
        r#"{"cniVersion":"1.1.0","name":"inl","loadOnlyInlinedPlugins":"True","plugins":[{"type":"ptp"}]}"#,
    );
    let list = load_network(dir.path(), "inl").unwrap();
    assert!(list.load_only_inlined_plugins);
    assert_eq!(list.plugins.len(), 1);

    // loadOnlyInlinedPlugins without plugins is an error; no plugins anywhere too.
    let lone = TempDir::new("subdir2");
    lone.write(
        "a.conflist",
        r#"{"name":"x","loadOnlyInlinedPlugins":true}"#,
    );
    let err = load_network(lone.path(), "x").unwrap_err().to_string();
    assert!(err.contains("loadOnlyInlinedPlugins"), "{err}");
    lone.write("a.conflist", r#"{"name":"x"}"#);
    let err = load_network(lone.path(), "x").unwrap_err().to_string();
    assert!(err.contains("no plugin configs found"), "{err}");
    // A broken sub-directory plugin names its file.
    lone.write("x/bad.conf", r#"{"notype":1}"#);
    let err = load_network(lone.path(), "x").unwrap_err().to_string();
    assert!(
        err.contains("bad.conf") && err.contains("missing 'type'"),
        "{err}"
    );
}

#[test]
fn cni_versions_selection() {
    let pick = |json: &str| NetworkConfigList::from_bytes(json.as_bytes()).map(|l| l.cni_version);
    let p = r#""plugins":[{"type":"x"}]"#;
    assert_eq!(
        pick(&format!(
            r#"{{"name":"n","cniVersion":"0.4.0","cniVersions":["0.3.1","1.0.0","9.9.9"],{p}}}"#
        ))
        .unwrap(),
        "1.0.0"
    );
    assert_eq!(
        pick(&format!(
            r#"{{"name":"n","cniVersion":"1.1.0","cniVersions":["1.0.0"],{p}}}"#
        ))
        .unwrap(),
        "1.1.0"
    );
    // Everything too new: cniVersion is kept as written.
    assert_eq!(
        pick(&format!(r#"{{"name":"n","cniVersions":["2.0.0"],{p}}}"#)).unwrap(),
        ""
    );
    assert_eq!(
        pick(&format!(
            r#"{{"name":"n","cniVersion":"0.10.0","cniVersions":["0.9.0"],{p}}}"#
        ))
        .unwrap(),
        "0.10.0"
    );
    // Without cniVersions, cniVersion is used as is.
    assert_eq!(
        pick(&format!(r#"{{"name":"n","cniVersion":"3.0.0",{p}}}"#)).unwrap(),
        "3.0.0"
    );
    assert!(pick(&format!(r#"{{"name":"n","cniVersions":["one"],{p}}}"#)).is_err());
    assert!(pick(&format!(r#"{{"name":"n","cniVersions":"1.0.0",{p}}}"#)).is_err());
    assert!(pick(&format!(r#"{{"name":"n","cniVersions":[1],{p}}}"#)).is_err());
    let l = NetworkConfigList::from_bytes(
        format!(r#"{{"name":"n","cniVersions":["1.0.0","9.0.0"],{p}}}"#).as_bytes(),
    )
    .unwrap();
    assert_eq!(l.cni_versions, ["1.0.0", "9.0.0"]);
}

#[test]
fn list_field_validation() {
    let parse = |json: &str| NetworkConfigList::from_bytes(json.as_bytes());
    let l = parse(r#"{"name":"n","cniVersion":"1.1.0","disableCheck":"TRUE","disableGC":true,"plugins":[{"type":"x","custom":{"k":[1,2]}}]}"#).unwrap();
    assert!(l.disable_check && l.disable_gc && !l.load_only_inlined_plugins);
    assert_eq!(l.plugins[0].raw["custom"], json!({"k":[1,2]}));
    assert!(parse(r#"{"name":"n","disableCheck":"false","plugins":[{"type":"x"}]}"#).is_ok());

    for (bad, why) in [
        (
            r#"{"name":"n","disableCheck":"yes","plugins":[{"type":"x"}]}"#,
            "invalid value",
        ),
        (
            r#"{"name":"n","disableGC":1,"plugins":[{"type":"x"}]}"#,
            "invalid type",
        ),
        (
            r#"{"cniVersion":"1.0.0","plugins":[{"type":"x"}]}"#,
            "no name",
        ),
        (
            r#"{"name":5,"plugins":[{"type":"x"}]}"#,
            "invalid name type",
        ),
        (
            r#"{"name":"n","cniVersion":1,"plugins":[{"type":"x"}]}"#,
            "invalid cniVersion type",
        ),
        (r#"{"name":"n","plugins":{}}"#, "invalid 'plugins' type"),
        (r#"{"name":"n","plugins":[]}"#, "no plugins in list"),
        (r#"{"name":"n","plugins":[{"name":"x"}]}"#, "missing 'type'"),
        (r#"{"name":"n","plugins":[{"type":""}]}"#, "missing 'type'"),
        (
            r#"{"name":"n","plugins":[{"type":3}]}"#,
            "'type' must be a string",
        ),
        (r#"{"name":"n","plugins":["x"]}"#, "expected a JSON object"),
        (
            r#"{"name":"n","plugins":[{"type":"x","capabilities":{"a":"yes"}}]}"#,
            "must be a boolean",
        ),
        (r#"[1]"#, "expected a JSON object"),
        ("", "error parsing configuration list"),
    ] {
        let err = parse(bad).unwrap_err().to_string();
        assert!(err.contains(why), "{bad}: {err}");
    }
}

#[test]
fn oversized_and_special_files_are_rejected_clearly() {
    let dir = TempDir::new("size");
    let mut big = conflist("big", "1.0.0", &["bridge"]).into_bytes();
    big.resize(MAX_CONF_FILE_SIZE as usize + 1, b' ');
    dir.write("10-big.conflist", &big);
    let err = load_network(dir.path(), "big").unwrap_err();
    assert!(matches!(err, ConfError::TooLarge { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("10-big.conflist") && msg.contains("too large"),
        "{msg}"
    );

    // Exactly at the cap is fine.
    let mut ok = conflist("ok", "1.0.0", &["bridge"]).into_bytes();
    ok.resize(MAX_CONF_FILE_SIZE as usize, b' ');
    let ok_dir = TempDir::new("size-ok");
    ok_dir.write("10.conflist", &ok);
    assert_eq!(load_network(ok_dir.path(), "ok").unwrap().name, "ok");

    // A directory named like a config is skipped; a FIFO is reported, not read.
    let odd = TempDir::new("odd");
    std::fs::create_dir(odd.join("00-dir.conflist")).unwrap();
    let fifo = odd.join("01-fifo.conf");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    odd.write("02-net.conflist", conflist("net", "1.0.0", &["bridge"]));
    let entries = list_dir(odd.path()).unwrap();
    assert_eq!(entries.len(), 2);
    assert!(matches!(
        entries[0].result,
        Err(ConfError::NotRegularFile { .. })
    ));
    assert_eq!(
        load_default(odd.path(), DefaultPolicy::SkipInvalid)
            .unwrap()
            .name,
        "net"
    );
}

#[test]
fn runtime_config_injection() {
    let plugin = PluginConf::from_map(obj(json!({
        "type": "portmap",
        "capabilities": {"portMappings": true, "bandwidth": false, "ips": true}
    })))
    .unwrap();
    let caps = obj(json!({
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1},
        "mac": "c2:11:22:33:44:55"
    }));
    let rc = runtime_config_for(&plugin, &caps).unwrap().unwrap();
    assert_eq!(rc.len(), 1);
    assert_eq!(rc["portMappings"][0]["hostPort"], 8080);
    assert_eq!(runtime_config_for(&plugin, &Map::new()).unwrap(), None);
    let null_cap = obj(json!({"portMappings": null}));
    assert!(runtime_config_for(&plugin, &null_cap).is_err());

    let list = NetworkConfigList::from_bytes(
        br#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"portmap","name":"inner","capabilities":{"portMappings":true}}]}"#,
    )
    .unwrap();
    let prev = json!({"cniVersion":"1.0.0","ips":[]});
    let conf = build_plugin_config(&list, &list.plugins[0], Some(&prev), Some(&caps)).unwrap();
    assert_eq!(conf["name"], "net", "the list name overrides the plugin's");
    assert_eq!(conf["cniVersion"], "1.0.0");
    assert_eq!(conf["prevResult"], prev);
    assert_eq!(
        conf["runtimeConfig"],
        json!({"portMappings": caps["portMappings"]})
    );
    let conf = build_plugin_config(&list, &list.plugins[0], None, None).unwrap();
    assert!(!conf.contains_key("prevResult") && !conf.contains_key("runtimeConfig"));

    let base = obj(json!({"type": "x"}));
    assert!(inject_conf(&base, [("".to_string(), json!(1))]).is_err());
    assert!(inject_conf(&base, [("k".to_string(), Value::Null)]).is_err());
    let out = inject_conf(
        &base,
        [
            ("type".to_string(), json!("y")),
            ("k".to_string(), json!(2)),
        ],
    )
    .unwrap();
    assert_eq!(Value::Object(out), json!({"type":"y","k":2}));
}

#[test]
fn conf_up_conversion_keeps_plugin_bytes() {
    let plugin = PluginConf::from_bytes(
        br#"{"cniVersion":"0.3.1","name":"single","type":"bridge","ipam":{"type":"host-local"}}"#,
    )
    .unwrap();
    let list = NetworkConfigList::from_plugin_conf(&plugin).unwrap();
    assert_eq!(list.name, "single");
    assert_eq!(list.cni_version, "0.3.1");
    assert_eq!(list.plugins.len(), 1);
    assert_eq!(list.plugins[0].raw["ipam"]["type"], "host-local");
    let raw: Value = serde_json::from_slice(&list.bytes).unwrap();
    assert_eq!(raw["plugins"][0]["name"], "single");
    assert_eq!(list.capabilities(), Vec::<String>::new());
}
