//! `invoke::delegate` as plugins use it (CNI_PATH and the rest of the env are inherited).
//! Kept in its own test binary because it changes the process environment.

mod common;

use common::FakePlugins;
use libcni::invoke::delegate;

#[test]
fn delegate_inherits_env_and_overrides_command() {
    let plugins = FakePlugins::new(&["ipam-fake"]);
    plugins.reply(
        "ipam-fake",
        "ADD",
        r#"{"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"}]}"#,
    );
    std::env::set_var(
        "CNI_PATH",
        format!("/nonexistent:{}", plugins.path().display()),
    );
    std::env::set_var("CNI_COMMAND", "CHECK");
    std::env::set_var("CNI_CONTAINERID", "ctr-7");
    std::env::set_var("CNI_IFNAME", "net1");
    std::env::set_var("CNI_NETNS", "/run/netns/p");
    std::env::set_var("CNI_ARGS", "IgnoreUnknown=1");
    let conf = br#"{"cniVersion":"0.4.0","name":"n","type":"bridge","ipam":{"type":"ipam-fake"}}"#;

    let result = delegate("ipam-fake", "ADD", conf).unwrap().unwrap();
    // No cniVersion in the delegate's output: the request's version is assumed.
    assert_eq!(result["cniVersion"], "0.4.0");
    assert_eq!(result["ips"][0]["address"], "10.1.0.5/24");
    assert_eq!(
        plugins.calls(),
        ["ipam-fake ADD cid=ctr-7 if=net1 netns=/run/netns/p args=IgnoreUnknown=1"]
    );
    assert_eq!(
        plugins.stdin("ipam-fake", "ADD")["ipam"]["type"],
        "ipam-fake"
    );

    assert_eq!(delegate("ipam-fake", "DEL", conf).unwrap(), None);
    assert_eq!(plugins.call_names()[1], "ipam-fake DEL");

    plugins.fail("ipam-fake", "DEL", r#"{"code":11,"msg":"try again"}"#, "");
    let err = delegate("ipam-fake", "DEL", conf).unwrap_err();
    assert_eq!((err.code, err.msg.as_str()), (11, "try again"));

    let err = delegate("missing-ipam", "ADD", conf).unwrap_err();
    assert!(
        err.msg
            .starts_with("failed to find plugin \"missing-ipam\" in path [/nonexistent "),
        "{}",
        err.msg
    );
}
