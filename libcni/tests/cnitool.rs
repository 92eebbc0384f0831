//! The `cnitool` binary against fake plugins (no namespaces needed: plugins are scripts).

mod common;

use std::process::{Command, Output};

use common::{FakePlugins, TempDir};
use serde_json::Value;

const RESULT: &str = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}"#;

struct Tool {
    plugins: FakePlugins,
    confdir: TempDir,
    cache: TempDir,
}

impl Tool {
    fn new() -> Tool {
        let plugins = FakePlugins::new(&["fake"]);
        plugins.reply("fake", "ADD", RESULT);
        let confdir = TempDir::new("netconf");
        confdir.write(
            "10-net.conflist",
            r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"fake","capabilities":{"mac":true}}]}"#,
        );
        Tool {
            plugins,
            confdir,
            cache: TempDir::new("cnitool-cache"),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cnitool"));
        cmd.args(args)
            .env("NETCONFPATH", self.confdir.path())
            .env("CNI_PATH", self.plugins.path())
            .env("CNI_CACHE_DIR", self.cache.path())
            .env_remove("CNI_IFNAME")
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("CNITOOL_POLICY");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn add_derives_container_id_and_prints_indented_result() {
    let t = Tool::new();
    let out = t.run(&["add", "net", "/var/run/netns/testing"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("{\n    \"cniVersion\": \"1.0.0\""),
        "{stdout}"
    );
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(printed["ips"][0]["address"], "10.0.0.2/24");
    // printf %s /var/run/netns/testing | sha512sum | cut -c1-20
    assert_eq!(
        t.plugins.calls(),
        ["fake ADD cid=cnitool-77383ca0a0715733ca6f if=eth0 netns=/var/run/netns/testing args="]
    );
    assert!(t
        .cache
        .join("results/net-cnitool-77383ca0a0715733ca6f-eth0")
        .exists());

    let out = t.run(&["check", "net", "/var/run/netns/testing"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let out = t.run(&["del", "net", "/var/run/netns/testing"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!t
        .cache
        .join("results/net-cnitool-77383ca0a0715733ca6f-eth0")
        .exists());
    assert_eq!(
        t.plugins.call_names(),
        ["fake ADD", "fake CHECK", "fake DEL"]
    );
}

#[test]
fn ifname_flag_beats_env_and_args_are_passed() {
    let t = Tool::new();
    let out = t
        .cmd(&["-i", "net7", "add", "net", "/run/netns/../netns/x"])
        .env("CNI_IFNAME", "fromenv")
        .env("CNI_ARGS", "A=1;B=2")
        .env(
            "CAP_ARGS",
            r#"{"mac":"c2:11:22:33:44:55","ips":["10.0.0.9/24"]}"#,
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        t.plugins.calls(),
        ["fake ADD cid=cnitool-55e2cecc95014b0f7fc4 if=net7 netns=/run/netns/x args=A=1;B=2"]
    );
    let stdin = t.plugins.stdin("fake", "ADD");
    assert_eq!(
        stdin["runtimeConfig"],
        serde_json::json!({"mac": "c2:11:22:33:44:55"})
    );

    let out = t
        .cmd(&["del", "net", "/run/netns/x"])
        .env("CNI_IFNAME", "fromenv")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(t.plugins.calls()[1].contains("if=fromenv"));
    let out = t
        .cmd(&["del", "--ifname=net9", "net", "/run/netns/x"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(t.plugins.calls()[2].contains("if=net9"));
}

#[test]
fn errors_go_to_stderr_with_exit_1() {
    let t = Tool::new();
    let out = t
        .cmd(&["add", "net", "/run/netns/x"])
        .env("CNI_ARGS", "novalue")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "invalid CNI_ARGS pair \"novalue\""
    );

    let out = t
        .cmd(&["add", "net", "/run/netns/x"])
        .env("CAP_ARGS", "[1]")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));

    let out = t.run(&["add", "nope", "/run/netns/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no net configuration with name \"nope\""));

    t.plugins.fail(
        "fake",
        "ADD",
        r#"{"code":7,"msg":"bad","details":"why"}"#,
        "",
    );
    let out = t.run(&["add", "net", "/run/netns/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr).trim(),
        "plugin type=\"fake\" failed (add): bad; why"
    );

    let out = t.run(&["add", "net"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("usage"));
    assert_eq!(t.run(&["frobnicate", "net", "/x"]).status.code(), Some(1));
}

#[test]
fn gc_and_status() {
    let t = Tool::new();
    assert!(t.run(&["add", "net", "/run/netns/a"]).status.success());
    assert!(t.run(&["add", "net", "/run/netns/b"]).status.success());
    let out = t.run(&["gc", "net", "/run/netns/a"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // gc without a valid list DELs every cached attachment, then GCs the plugin.
    assert_eq!(
        t.plugins.call_names(),
        ["fake ADD", "fake ADD", "fake DEL", "fake DEL", "fake GC"]
    );
    assert!(t
        .plugins
        .stdin("fake", "GC")
        .get("cni.dev/valid-attachments")
        .is_none());
    assert_eq!(
        std::fs::read_dir(t.cache.join("results")).unwrap().count(),
        0
    );

    assert!(t.run(&["status", "net"]).status.success());
    t.plugins
        .fail("fake", "STATUS", r#"{"code":50,"msg":"not ready"}"#, "");
    let out = t.run(&["status", "net", "/run/netns/a"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr).trim(), "not ready");
}

#[test]
fn list_shows_files_default_and_errors() {
    let t = Tool::new();
    t.confdir.write("00-broken.conf", "{");
    t.confdir.write(
        "20-other.conf",
        r#"{"cniVersion":"0.4.0","name":"other","type":"bridge"}"#,
    );

    let out = t.run(&["list"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "first file invalid => no default"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("  00-broken.conf") && stdout.contains("INVALID"),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("no default network"));

    let out = t.run(&["list", "--policy", "skip-invalid"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[1].starts_with("  00-broken.conf"), "{stdout}");
    assert!(
        lines[2].starts_with("* 10-net.conflist") && lines[2].contains("plugins=fake"),
        "{stdout}"
    );
    assert!(lines[3].starts_with("  20-other.conf"), "{stdout}");
    assert!(
        stdout.contains("default network: net (10-net.conflist)"),
        "{stdout}"
    );

    let out = t
        .cmd(&["list"])
        .env("CNITOOL_POLICY", "skip-invalid")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(t.run(&["list", "--policy", "bogus"]).status.code(), Some(1));
}
