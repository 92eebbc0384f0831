//! OCI image archives made here from a root filesystem, for `ctr images import`: no registry,
//! no image builder. One uncompressed layer, the image config, a manifest and an index naming
//! the image.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::success_stdout;

/// The OCI platform name of this machine's architecture.
pub fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Packs `rootfs` as image `name` (`host/repo:tag`) with the image config's `config` section
/// (Env, Cmd, ...) into `<dir>/<file name of name>.tar`, an OCI image layout archive; its path.
/// Works in `<dir>/oci` and removes it after.
pub fn write_image(dir: &Path, rootfs: &Path, name: &str, config: Value) -> PathBuf {
    let layout = dir.join("oci");
    let _ = fs::remove_dir_all(&layout);
    fs::create_dir_all(layout.join("blobs/sha256")).expect("create the OCI layout");
    let layer_tar = dir.join("layer.tar");
    run_ok(
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
            .arg(rootfs)
            .arg("-cf")
            .arg(&layer_tar)
            .arg("."),
    );
    let layer = write_blob(
        &layout,
        "application/vnd.oci.image.layer.v1.tar",
        &fs::read(&layer_tar).expect("read layer.tar"),
    );
    let _ = fs::remove_file(&layer_tar);
    let config = json!({
        "architecture": oci_architecture(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    });
    let config = write_blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    });
    let mut manifest = write_blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    let tag = name.rsplit_once(':').map_or("latest", |(_, t)| t);
    manifest["annotations"] = json!({
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": tag,
    });
    let index = json!({"schemaVersion": 2, "manifests": [manifest]});
    fs::write(layout.join("index.json"), index.to_string()).expect("index.json");
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("oci-layout");
    let file = name.rsplit('/').next().unwrap_or(name).replace(':', "-");
    let archive = dir.join(format!("{file}.tar"));
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-cf")
            .arg(&archive)
            .args(["oci-layout", "index.json", "blobs"]),
    );
    let _ = fs::remove_dir_all(&layout);
    archive
}

/// Writes `bytes` as a blob of the OCI layout at `layout`; returns its descriptor.
fn write_blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let digest = format!("{:x}", Sha256::digest(bytes));
    let path = layout.join("blobs/sha256").join(&digest);
    fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    json!({"mediaType": media_type, "digest": format!("sha256:{digest}"), "size": bytes.len()})
}

fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    success_stdout(&format!("{cmd:?}"), out);
}
