//! Every shipped binary names the suite and its version: each plugin's about text (run without
//! CNI_COMMAND, as upstream's `CNI bridge plugin v1.9.1`), `cnitool --version` and
//! `ferrocni-agent --version`, all the workspace's one version.

use std::process::{Command, Stdio};

use netns_tests::{our_binary, workspace_root};

/// Every plugin binary of the workspace (named as their CNI `type`).
fn plugins() -> Vec<String> {
    let root = workspace_root();
    let mut names = Vec::new();
    for group in ["plugins", "ipam"] {
        for entry in std::fs::read_dir(root.join(group)).unwrap() {
            let manifest = entry.unwrap().path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap_or_default()
                .to_string();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

#[test]
fn every_binary_reports_the_suite_version() {
    let version = format!("ferrocni v{}", env!("CARGO_PKG_VERSION"));
    let names = plugins();
    assert!(names.len() > 15, "{names:?}");
    for name in &names {
        let out = Command::new(our_binary(name))
            .env_remove("CNI_COMMAND")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let about = String::from_utf8_lossy(&out.stderr);
        let first = about.lines().next().unwrap_or_default();
        assert!(out.status.success(), "{name}: {about}");
        assert!(
            first.starts_with("CNI ") && first.contains(&version),
            "{name}: {first:?}"
        );
        assert!(!about.contains("(ferrocni)"), "{name}: {about}");
    }
    let out = Command::new(our_binary("cnitool"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("cnitool {version}\n")
    );
    let out = Command::new(our_binary("ferrocni-agent"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("ferrocni-agent {version}\n")
    );
}
