//! Env validation, version gating and output rules of the skeleton.

use super::*;
use std::collections::HashMap;

struct MapEnv(HashMap<&'static str, String>);

impl Env for MapEnv {
    fn var(&self, name: &str) -> String {
        self.0.get(name).cloned().unwrap_or_default()
    }
    fn is_set(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

fn env(cmd: &str) -> MapEnv {
    let mut m = HashMap::new();
    if !cmd.is_empty() {
        m.insert("CNI_COMMAND", cmd.to_string());
    }
    m.insert("CNI_CONTAINERID", "c1".to_string());
    m.insert("CNI_NETNS", "/nonexistent/netns".to_string());
    m.insert("CNI_IFNAME", "eth0".to_string());
    m.insert("CNI_PATH", "/opt/cni/bin".to_string());
    MapEnv(m)
}

struct Echo;

impl Plugin for Echo {
    fn add(&self, a: &CmdArgs) -> Result<CniResult, CniError> {
        if a.container_id == "fail" {
            return Err(CniError::new(120, "plugin failure", "because"));
        }
        let mut r = a.prev_result()?.unwrap_or_else(CniResult::new);
        r.ips.push(crate::result::IpConfig {
            interface: None,
            address: "10.0.0.2/24".parse().unwrap(),
            gateway: None,
        });
        Ok(r)
    }
    fn del(&self, _a: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _a: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }
}

fn run_with(env: &MapEnv, stdin: &str) -> Outcome {
    dispatch(&Echo, env, &mut stdin.as_bytes())
}

fn fail_json(o: Outcome) -> Value {
    match o {
        Outcome::Fail(s) => serde_json::from_str(&s).unwrap(),
        other => panic!("expected failure, got {other:?}"),
    }
}

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net1","type":"echo"}"#;

#[test]
fn no_command_prints_about() {
    assert!(matches!(run_with(&env(""), CONF), Outcome::About));
}

#[test]
fn about_text_carries_the_suite_version() {
    let v = env!("CARGO_PKG_VERSION");
    assert_eq!(
        about_text("CNI bridge plugin (ferrocni)"),
        format!("CNI bridge plugin ferrocni v{v}")
    );
    assert_eq!(
        about_text("CNI bandwidth plugin (ferrocni): TBF shaping"),
        format!("CNI bandwidth plugin ferrocni v{v}: TBF shaping")
    );
    assert_eq!(
        about_text("CNI x plugin\nmore"),
        format!("CNI x plugin ferrocni v{v}\nmore")
    );
}

#[test]
fn version_ignores_stdin() {
    match run_with(&env("VERSION"), "garbage") {
        Outcome::Print(s) => {
            let v: Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["cniVersion"], "1.1.0");
            assert_eq!(v["supportedVersions"].as_array().unwrap().len(), 7);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn missing_vars_are_listed() {
    let mut e = env("ADD");
    e.0.remove("CNI_NETNS");
    e.0.remove("CNI_PATH");
    let v = fail_json(run_with(&e, CONF));
    assert_eq!(v["code"], 4);
    assert_eq!(
        v["msg"],
        "required env variables [CNI_NETNS,CNI_PATH] missing"
    );
    // DEL does not need CNI_NETNS
    let mut e = env("DEL");
    e.0.remove("CNI_NETNS");
    assert!(matches!(run_with(&e, CONF), Outcome::Done));
    // GC needs neither container id nor ifname
    let mut e = env("GC");
    e.0.remove("CNI_CONTAINERID");
    e.0.remove("CNI_IFNAME");
    let conf = r#"{"cniVersion":"1.1.0","name":"net1","type":"echo"}"#;
    assert!(matches!(run_with(&e, conf), Outcome::Done));
}

#[test]
fn unknown_command_is_code_4() {
    let v = fail_json(run_with(&env("FROB"), CONF));
    assert_eq!(v["code"], 4);
    assert_eq!(v["msg"], "unknown CNI_COMMAND: FROB");
}

#[test]
fn bad_json_and_missing_name() {
    assert_eq!(fail_json(run_with(&env("ADD"), "{"))["code"], 6);
    assert_eq!(fail_json(run_with(&env("ADD"), "[]"))["code"], 6);
    assert_eq!(
        fail_json(run_with(&env("ADD"), r#"{"cniVersion":"1.0.0"}"#))["code"],
        7
    );
    assert_eq!(
        fail_json(run_with(&env("ADD"), r#"{"name":"../x"}"#))["code"],
        7
    );
}

#[test]
fn container_and_ifname_rules() {
    let mut e = env("ADD");
    e.0.insert("CNI_CONTAINERID", "../../etc".into());
    assert_eq!(fail_json(run_with(&e, CONF))["code"], 4);
    let mut e = env("ADD");
    e.0.insert("CNI_IFNAME", "a-very-long-interface-name".into());
    assert_eq!(fail_json(run_with(&e, CONF))["code"], 4);
}

#[test]
fn version_gating() {
    let v = fail_json(run_with(
        &env("ADD"),
        r#"{"cniVersion":"9.9.9","name":"n"}"#,
    ));
    assert_eq!(v["code"], 1);
    assert_eq!(v["msg"], "incompatible CNI versions");
    assert!(v.get("cniVersion").is_none());
    let v = fail_json(run_with(
        &env("CHECK"),
        r#"{"cniVersion":"0.3.1","name":"n"}"#,
    ));
    assert_eq!(v["code"], 1);
    assert_eq!(v["msg"], "config version does not allow CHECK");
    let mut e = env("STATUS");
    e.0.remove("CNI_CONTAINERID");
    let v = fail_json(run_with(&e, CONF));
    assert_eq!(v["msg"], "config version does not allow STATUS");
}

#[test]
fn add_prints_in_request_version() {
    let conf = r#"{"cniVersion":"0.4.0","name":"net1","type":"echo"}"#;
    match run_with(&env("ADD"), conf) {
        Outcome::Print(s) => {
            assert!(s.contains("\n    \"cniVersion\": \"0.4.0\""), "{s}");
            let v: Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["ips"][0]["version"], "4");
        }
        o => panic!("{o:?}"),
    }
    let conf = r#"{"cniVersion":"0.2.0","name":"net1","type":"echo"}"#;
    match run_with(&env("ADD"), conf) {
        Outcome::Print(s) => assert!(s.contains("\"ip4\""), "{s}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn prev_result_is_parsed_from_any_version() {
    let conf = r#"{"cniVersion":"1.0.0","name":"net1","type":"echo",
        "prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.9.0.2/16"}]}}"#;
    match run_with(&env("ADD"), conf) {
        Outcome::Print(s) => {
            let v: Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["cniVersion"], "1.0.0");
            assert_eq!(v["ips"].as_array().unwrap().len(), 2);
        }
        o => panic!("{o:?}"),
    }
    let conf = r#"{"cniVersion":"1.0.0","name":"net1","prevResult":{"ips":"bad"}}"#;
    assert_eq!(fail_json(run_with(&env("ADD"), conf))["code"], 6);
}

#[test]
fn plugin_errors_carry_the_version() {
    let mut e = env("ADD");
    e.0.insert("CNI_CONTAINERID", "fail".into());
    let v = fail_json(run_with(&e, CONF));
    assert_eq!(
        v,
        serde_json::json!({"cniVersion":"1.0.0","code":120,"msg":"plugin failure","details":"because"})
    );
}

#[test]
fn oversized_stdin_is_rejected() {
    let big = format!(
        r#"{{"name":"n","pad":"{}"}}"#,
        "x".repeat(MAX_STDIN_BYTES as usize)
    );
    let v = fail_json(run_with(&env("ADD"), &big));
    assert_eq!(v["code"], 5);
    assert!(v["msg"].as_str().unwrap().contains("exceeds"));
}

#[test]
fn own_netns_is_refused() {
    let mut e = env("ADD");
    e.0.insert("CNI_NETNS", "/proc/self/ns/net".into());
    let refused = fail_json(run_with(&e, CONF));
    assert_eq!(refused["code"], 8);
    assert_eq!(
        refused["msg"],
        "plugin's netns and netns from CNI_NETNS should not be the same"
    );
    for yes in ["1", "true", "TRUE", "True", "tRUE", "t", "T"] {
        e.0.insert("CNI_NETNS_OVERRIDE", yes.into());
        assert!(
            matches!(run_with(&e, CONF), Outcome::Print(_)),
            "CNI_NETNS_OVERRIDE={yes} must override"
        );
    }
    for no in ["", "0", "false", "yes", "on", "2", " true"] {
        e.0.insert("CNI_NETNS_OVERRIDE", no.into());
        assert_eq!(
            fail_json(run_with(&e, CONF))["code"],
            8,
            "CNI_NETNS_OVERRIDE={no:?} must not override"
        );
    }
}

#[test]
fn valid_attachments_parse() {
    let conf = r#"{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#;
    let (config, name, ver) = parse_config(conf.as_bytes()).unwrap();
    let args = CmdArgs {
        command: Command::Gc,
        container_id: String::new(),
        netns: String::new(),
        ifname: String::new(),
        args: String::new(),
        path: vec![],
        stdin: conf.as_bytes().to_vec(),
        config,
        cni_version: ver,
        network_name: name,
    };
    assert_eq!(
        args.valid_attachments().unwrap(),
        vec![("a".to_string(), "eth0".to_string())]
    );
}

#[test]
fn per_plugin_version_list() {
    let supported = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    let conf = r#"{"cniVersion":"0.2.0","name":"net1","type":"echo"}"#;
    match dispatch_versions(&Echo, &env("ADD"), &mut conf.as_bytes(), supported) {
        Outcome::Fail(s) => {
            let v: Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["code"], 1);
            assert!(v["details"].as_str().unwrap().contains("0.3.0"));
        }
        o => panic!("{o:?}"),
    }
    match dispatch_versions(&Echo, &env("VERSION"), &mut "".as_bytes(), supported) {
        Outcome::Print(s) => {
            let v: Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["supportedVersions"].as_array().unwrap().len(), 5);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn the_own_netns_asked_of_a_socket_is_the_one_proc_shows() {
    assert_eq!(
        own_netns_identity(),
        ns_identity("/proc/thread-self/ns/net")
    );
    assert!(own_netns_identity().is_some());
}
