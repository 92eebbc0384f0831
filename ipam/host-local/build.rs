//! The build stamp (see `libcni::linked`): a hash of every source that shapes how host-local
//! answers a call, whether executed or linked into another plugin: this crate, libcni (the
//! skeleton, results, errors) and the locked dependency versions. Two builds of the same
//! sources get the same stamp; any change to them gives another.

use std::path::{Path, PathBuf};

/// FNV-1a over 128 bits: the stamp tells builds apart, it guards against no adversary (who
/// can write to CNI_PATH can replace the plugins themselves).
struct Fnv(u128);

impl Fnv {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// A length-prefixed part, so that no two sequences of parts feed the same bytes.
    fn part(&mut self, bytes: &[u8]) {
        self.feed(&(bytes.len() as u64).to_le_bytes());
        self.feed(bytes);
    }
}

/// Every file under `path` (or `path` itself), sorted.
fn files(path: &Path, out: &mut Vec<PathBuf>) {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            children.sort();
            for child in children {
                files(&child, out);
            }
        }
        Err(_) if path.is_file() => out.push(path.to_path_buf()),
        Err(_) => {}
    }
}

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    // Canonical, so that the stamp holds paths relative to the workspace, wherever it is.
    let manifest = manifest.canonicalize().unwrap_or(manifest);
    let workspace = manifest.join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    let sources = [
        workspace.join("ipam/host-local/Cargo.toml"),
        workspace.join("ipam/host-local/build.rs"),
        workspace.join("ipam/host-local/src"),
        workspace.join("libcni/Cargo.toml"),
        workspace.join("libcni/src"),
        workspace.join("Cargo.toml"),
        workspace.join("Cargo.lock"),
    ];
    let mut hash = Fnv(Fnv::OFFSET);
    hash.part(
        std::env::var("CARGO_PKG_VERSION")
            .unwrap_or_default()
            .as_bytes(),
    );
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
        let mut found = Vec::new();
        files(source, &mut found);
        for file in found {
            let relative = file.strip_prefix(&workspace).unwrap_or(&file);
            hash.part(relative.to_string_lossy().as_bytes());
            hash.part(&std::fs::read(&file).unwrap_or_default());
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bytes = hash.0.to_le_bytes();
    std::fs::write(out.join("stamp.rs"), format!("{bytes:?}\n")).expect("OUT_DIR is writable");
}
