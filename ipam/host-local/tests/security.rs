//! No input or planted file can make the plugin create, read, change or delete a file
//! outside `<dataDir>/<network>/`.

mod common;
use common::*;
use serde_json::json;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

fn ipam() -> serde_json::Value {
    json!({"ranges": [[{"subnet": "10.70.0.0/24"}]]})
}

/// Runs with a deadline so a plugin blocked on a FIFO fails the test instead of hanging it.
fn run_bounded(cid: &str, c: &serde_json::Value, command: &str) -> Outcome {
    let mut child = Call::new(ours(), command, cid).spawn(c);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("plugin hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    finish(child)
}

fn tree(p: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap().filter_map(|e| e.ok()) {
        out.push(e.path().display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(tree(&e.path()));
        }
    }
    out.sort();
    out
}

#[test]
fn traversal_in_names_is_refused_before_touching_disk() {
    let root = TempDir::new("sec-trav");
    let data = root.path().join("a/b/data");
    for name in ["../../x", "..", "x/../../y", "/abs"] {
        let o = run(ours(), "ADD", "c1", &conf("1.0.0", name, &data, ipam()));
        assert!(!o.ok(), "network {name:?} accepted");
    }
    for cid in ["../x", "a/b", ".."] {
        let o = run(ours(), "ADD", cid, &conf("1.0.0", "net", &data, ipam()));
        assert!(!o.ok(), "container id {cid:?} accepted");
    }
    let mut call = Call::new(ours(), "ADD", "c1");
    call.ifname = "../eth0";
    assert!(!call.run(&conf("1.0.0", "net", &data, ipam())).ok());
    assert!(tree(root.path()).is_empty(), "{:?}", tree(root.path()));
}

#[test]
fn symlinked_store_dir_is_refused() {
    let root = TempDir::new("sec-dirlink");
    let data = root.path().join("data");
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, data.join("net")).unwrap();
    let c = conf("1.0.0", "net", &data, ipam());
    for command in ["ADD", "DEL", "CHECK"] {
        let o = run(ours(), command, "c1", &c);
        assert!(
            !o.ok() && o.stdout.contains("symlink"),
            "{command}: {}",
            o.stdout
        );
    }
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
}

#[test]
fn planted_symlinks_and_special_files_are_never_followed() {
    let root = TempDir::new("sec-plant");
    let data = root.path().join("data");
    let store = data.join("net");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    for f in ["victim", "last", "index", "tmp", "boot"] {
        std::fs::write(outside.join(f), "precious").unwrap();
    }
    symlink(outside.join("victim"), store.join("10.70.0.2")).unwrap();
    symlink(outside.join("last"), store.join("last_reserved_ip.0")).unwrap();
    symlink(outside.join("index"), store.join(".ferrocni-index")).unwrap();
    symlink(outside.join("tmp"), store.join(".ferrocni-tmp")).unwrap();
    symlink(outside.join("boot"), store.join(".ferrocni-boot")).unwrap();
    let fifo = std::ffi::CString::new(store.join("10.70.0.3").to_str().unwrap()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(store.join("10.70.0.4")).unwrap();

    let c = conf("1.0.0", "net", &data, ipam());
    let o = run_bounded("c1", &c, "ADD");
    assert_eq!(o.addresses(), ["10.70.0.5/24"], "{}", o.stdout);
    assert!(run_bounded("c1", &c, "CHECK").ok());
    assert!(run_bounded("c1", &c, "DEL").ok());
    let mut gc = c.clone();
    gc["cniVersion"] = "1.1.0".into();
    gc["cni.dev/valid-attachments"] = json!([]);
    assert!(run_bounded("", &gc, "GC").ok());
    for f in ["victim", "last", "index", "tmp", "boot"] {
        assert_eq!(
            std::fs::read_to_string(outside.join(f)).unwrap(),
            "precious",
            "{f} was modified"
        );
    }
    assert_eq!(tree(&outside).len(), 5, "{:?}", tree(&outside));
    // the planted lease symlink, FIFO and directory still block their addresses
    assert!(std::fs::symlink_metadata(store.join("10.70.0.2"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(store.join("10.70.0.4").is_dir());
}

#[test]
fn symlinked_lock_file_is_refused() {
    let root = TempDir::new("sec-lock");
    let data = root.path().join("data");
    let store = data.join("net");
    std::fs::create_dir_all(&store).unwrap();
    symlink(root.path().join("created-outside"), store.join("lock")).unwrap();
    let o = run(ours(), "ADD", "c1", &conf("1.0.0", "net", &data, ipam()));
    assert!(!o.ok(), "{}", o.stdout);
    assert!(!root.path().join("created-outside").exists());
}
