//! The runtime's result cache, on disk compatible with the Go libcni (`cniCacheV1`).
//!
//! One file per attachment at `<cacheDir>/results/<network>-<containerID>-<ifname>`:
//! `{"kind":"cniCacheV1","containerId","config":<base64 of the list bytes>,"ifName",
//! "networkName","netns","cniArgs":[[k,v]],"capabilityArgs":{},"result":{...}}`.
//! Older libcni versions wrote the bare result JSON instead ("legacy"); it is still readable.
//!
//! Files are written atomically (temporary file in the same directory, then rename), so a
//! crashing writer never leaves a truncated entry behind; the directory is created 0700 and
//! files 0600. There is no fsync, as in the Go libcni: it would put the disk's flush latency on
//! every ADD, and the cache need not survive a power loss. An entry emptied by one is treated as
//! absent, and DEL goes on without a prevResult.
//!
//! Entries record the boot that wrote them ([`crate::boot`]). An entry of an earlier boot
//! describes a container that died with it, whose addresses may belong to another one now:
//! [`ResultCache::read`] treats it as absent (no stale prevResult reaches a DEL or CHECK), and
//! [`ResultCache::list_attachments`] lists it without its netns (gone with the boot), so GC
//! DELs it as a runtime DELs a container whose netns is gone.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::gojson;

/// The `kind` of the current cache format.
pub const CACHE_KIND_V1: &str = "cniCacheV1";
/// Default cache directory of libcni.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";
/// Entries larger than this are treated as corrupt rather than read into memory.
const MAX_CACHE_FILE_SIZE: u64 = 16 * 1024 * 1024;

/// Why a cache operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache file path requires network name ({network:?}), container ID ({container_id:?}), and interface name ({ifname:?})")]
    MissingKey {
        network: String,
        container_id: String,
        ifname: String,
    },
    /// A key component would escape the results directory.
    #[error(
        "cannot use {0:?} in a cache file name: it must not contain '/' nor be \".\" or \"..\""
    )]
    UnsafeKey(String),
    #[error("failed to {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file exists but cannot be decoded (empty, truncated, not JSON, wrong shape).
    #[error("cache file {} is corrupt: {msg}", path.display())]
    Corrupt { path: PathBuf, msg: String },
}

/// A cache file that cannot be read or written is an I/O error (5), a corrupt one a decode
/// error (6), an unusable key (from the runtime's arguments) an invalid environment (4).
impl From<CacheError> for crate::error::CniError {
    fn from(e: CacheError) -> Self {
        use crate::error::{codes, CniError};
        let code = match &e {
            CacheError::Io { .. } => codes::IO,
            CacheError::Corrupt { .. } => codes::DECODE,
            CacheError::MissingKey { .. } | CacheError::UnsafeKey(_) => codes::INVALID_ENV,
        };
        CniError::new(code, e.to_string(), "")
    }
}

/// One cached attachment (the `cniCacheV1` record).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CacheEntry {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    /// Namespace path given at ADD time (empty when unknown).
    pub netns: String,
    /// The network configuration list bytes used for ADD.
    pub config: Vec<u8>,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
    /// The final ADD result, in the version the last plugin produced it.
    pub result: Option<Value>,
}

/// What a cache file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum CachedRecord {
    V1(Box<CacheEntry>),
    /// Pre-`cniCacheV1` file: the bare result JSON.
    Legacy(Value),
}

impl CachedRecord {
    /// The cached result, whatever the format.
    pub fn result(&self) -> Option<&Value> {
        match self {
            CachedRecord::V1(entry) => entry.result.as_ref(),
            CachedRecord::Legacy(result) => Some(result),
        }
    }
}

/// The result cache rooted at a cache directory (default [`DEFAULT_CACHE_DIR`]).
#[derive(Debug, Clone)]
pub struct ResultCache {
    root: PathBuf,
}

impl ResultCache {
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        ResultCache {
            root: cache_dir.into(),
        }
    }

    /// `<cacheDir>/results`.
    pub fn results_dir(&self) -> PathBuf {
        self.root.join("results")
    }

    /// `<cacheDir>/results/<network>-<containerID>-<ifname>`.
    pub fn file_path(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<PathBuf, CacheError> {
        if network.is_empty() || container_id.is_empty() || ifname.is_empty() {
            return Err(CacheError::MissingKey {
                network: network.into(),
                container_id: container_id.into(),
                ifname: ifname.into(),
            });
        }
        for part in [network, container_id, ifname] {
            if part.contains('/') || part.contains('\0') || part == "." || part == ".." {
                return Err(CacheError::UnsafeKey(part.into()));
            }
        }
        Ok(self
            .results_dir()
            .join(format!("{network}-{container_id}-{ifname}")))
    }

    /// Writes `entry` atomically; returns the file written.
    pub fn write(&self, entry: &CacheEntry) -> Result<PathBuf, CacheError> {
        let path = self.file_path(&entry.network, &entry.container_id, &entry.ifname)?;
        write_atomically(&path, &encode_entry(entry))?;
        Ok(path)
    }

    /// Reads and decodes an entry; `Ok(None)` when there is none.
    pub fn read(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<CachedRecord>, CacheError> {
        let path = self.file_path(network, container_id, ifname)?;
        let Some(Entry {
            bytes,
            earlier_boot: false,
        }) = read_bounded(&path)?
        else {
            return Ok(None);
        };
        decode_record(&bytes)
            .map(Some)
            .map_err(|msg| CacheError::Corrupt { path, msg })
    }

    /// The cached result of an attachment (current or legacy format); `Ok(None)` when not cached.
    pub fn read_result(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<Value>, CacheError> {
        match self.read(network, container_id, ifname)? {
            None => Ok(None),
            Some(record) => match record.result() {
                Some(result) => Ok(Some(result.clone())),
                None => Err(CacheError::Corrupt {
                    path: self.file_path(network, container_id, ifname)?,
                    msg: "entry has no result".into(),
                }),
            },
        }
    }

    /// Removes an entry; a missing entry is not an error.
    pub fn remove(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), CacheError> {
        let path = self.file_path(network, container_id, ifname)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(CacheError::Io {
                op: "remove cache file",
                path,
                source,
            }),
        }
    }

    /// Every readable `cniCacheV1` entry, sorted by file name, optionally restricted to one
    /// network and/or container. Legacy, corrupt and temporary files are skipped (they carry
    /// no attachment identity); a missing results directory yields an empty list.
    pub fn list_attachments(
        &self,
        network: Option<&str>,
        container_id: Option<&str>,
    ) -> Result<Vec<CacheEntry>, CacheError> {
        let dir = self.results_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(CacheError::Io {
                    op: "read cache directory",
                    path: dir,
                    source,
                })
            }
        };
        let mut names: Vec<std::ffi::OsString> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .filter(|n| !n.to_string_lossy().starts_with('.'))
            .collect();
        names.sort();

        let mut out = Vec::new();
        for name in names {
            let Ok(Some(Entry {
                bytes,
                earlier_boot,
            })) = read_bounded(&dir.join(&name))
            else {
                continue;
            };
            let Ok(CachedRecord::V1(mut entry)) = decode_record(&bytes) else {
                continue;
            };
            if earlier_boot {
                entry.netns.clear();
            }
            if entry.ifname.is_empty() || entry.network.is_empty() {
                continue;
            }
            if network.is_some_and(|n| n != entry.network)
                || container_id.is_some_and(|c| c != entry.container_id)
            {
                continue;
            }
            out.push(*entry);
        }
        Ok(out)
    }
}

/// Serializes an entry exactly as the Go libcni does (field order, omitted empty fields).
pub fn encode_entry(entry: &CacheEntry) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("kind".into(), CACHE_KIND_V1.into());
    obj.insert("containerId".into(), entry.container_id.clone().into());
    obj.insert("config".into(), base64_encode(&entry.config).into());
    obj.insert("ifName".into(), entry.ifname.clone().into());
    obj.insert("networkName".into(), entry.network.clone().into());
    if !entry.netns.is_empty() {
        obj.insert("netns".into(), entry.netns.clone().into());
    }
    if !entry.cni_args.is_empty() {
        let pairs = entry
            .cni_args
            .iter()
            .map(|(k, v)| Value::Array(vec![k.clone().into(), v.clone().into()]))
            .collect();
        obj.insert("cniArgs".into(), Value::Array(pairs));
    }
    if !entry.capability_args.is_empty() {
        obj.insert(
            "capabilityArgs".into(),
            Value::Object(entry.capability_args.clone()),
        );
    }
    if let Some(result) = &entry.result {
        obj.insert("result".into(), result.clone());
    }
    // Serializing a Value cannot fail (keys are strings).
    serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
}

/// Decodes a cache file: `cniCacheV1` when `kind` says so, otherwise a legacy bare result.
pub fn decode_record(bytes: &[u8]) -> Result<CachedRecord, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("file is empty".into());
    }
    let value: Value = gojson::parse(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("not a JSON object".into());
    };
    if gojson::get(&obj, "kind").and_then(Value::as_str) != Some(CACHE_KIND_V1) {
        return Ok(CachedRecord::Legacy(Value::Object(obj)));
    }
    decode_v1(&obj).map(|e| CachedRecord::V1(Box::new(e)))
}

fn decode_v1(obj: &Map<String, Value>) -> Result<CacheEntry, String> {
    let string = |key: &str| -> Result<String, String> {
        match gojson::get(obj, key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{key} is not a string")),
        }
    };
    let config = match gojson::get(obj, "config") {
        None => Vec::new(),
        Some(Value::String(s)) => base64_decode(s).map_err(|e| format!("config: {e}"))?,
        Some(_) => return Err("config is not a base64 string".into()),
    };
    let cni_args = match gojson::get(obj, "cniArgs") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                Some([Value::String(k), Value::String(v)]) => Ok((k.clone(), v.clone())),
                _ => Err("cniArgs entries must be [key, value] string pairs".to_string()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("cniArgs is not a list".into()),
    };
    let capability_args = match gojson::get(obj, "capabilityArgs") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err("capabilityArgs is not an object".into()),
    };
    let result = match gojson::get(obj, "result") {
        None => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return Err("result is not an object".into()),
    };
    Ok(CacheEntry {
        container_id: string("containerId")?,
        network: string("networkName")?,
        ifname: string("ifName")?,
        netns: string("netns")?,
        config,
        cni_args,
        capability_args,
        result,
    })
}

/// A cache file's bytes, and whether an earlier boot of the node wrote them.
struct Entry {
    bytes: Vec<u8>,
    earlier_boot: bool,
}

/// Reads a file of at most [`MAX_CACHE_FILE_SIZE`] bytes; `Ok(None)` if it does not exist.
fn read_bounded(path: &Path) -> Result<Option<Entry>, CacheError> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CacheError::Io {
                op: "open cache file",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let earlier_boot = crate::boot::is_from_earlier_boot(&file);
    let mut bytes = Vec::new();
    file.take(MAX_CACHE_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| CacheError::Io {
            op: "read cache file",
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_CACHE_FILE_SIZE {
        return Err(CacheError::Corrupt {
            path: path.to_path_buf(),
            msg: format!("larger than {MAX_CACHE_FILE_SIZE} bytes"),
        });
    }
    Ok(Some(Entry {
        bytes,
        earlier_boot,
    }))
}

/// Temp file in the same directory + rename over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    crate::statefile::write_atomic(path, bytes).map_err(|source| CacheError::Io {
        op: "write cache file",
        path: path.to_path_buf(),
        source,
    })
}

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what Go's `encoding/json` uses for `[]byte`).
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64_ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64; padding is optional and line breaks are ignored (as in Go).
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut sextets = Vec::with_capacity(text.len());
    let mut padding = 0;
    for (i, c) in text.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'\r' | b'\n' => continue,
            b'=' => {
                padding += 1;
                continue;
            }
            _ => return Err(format!("invalid base64 character at offset {i}")),
        };
        if padding > 0 {
            return Err(format!("base64 data after padding at offset {i}"));
        }
        sextets.push(v);
    }
    if sextets.len() % 4 == 1 || padding > 2 {
        return Err("invalid base64 length".into());
    }
    if padding > 0 && (sextets.len() + padding) % 4 != 0 {
        return Err("invalid base64 padding".into());
    }
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let mut n = 0u32;
        for (i, s) in chunk.iter().enumerate() {
            n |= u32::from(*s) << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_and_known_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(raw.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), raw.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)).unwrap(), all);
        assert_eq!(base64_decode("Zm9vYg").unwrap(), b"foob");
        assert!(base64_decode("Zm9v!").is_err());
        assert!(base64_decode("Z").is_err());
        assert!(base64_decode("Zg==Zg==").is_err());
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use crate::error::CniError;

    #[test]
    fn codes_and_texts() {
        let e = CniError::from(CacheError::UnsafeKey("..".into()));
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                4,
                "cannot use \"..\" in a cache file name: it must not contain '/' nor be \".\" or \"..\""
            )
        );
        let e = CniError::from(CacheError::Corrupt {
            path: "/var/lib/cni/results/n-c-eth0".into(),
            msg: "empty".into(),
        });
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                6,
                "cache file /var/lib/cni/results/n-c-eth0 is corrupt: empty"
            )
        );
        let e = CniError::from(CacheError::Io {
            op: "write",
            path: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(e.code, 5);
        assert!(e.msg.starts_with("failed to write /x: "), "{}", e.msg);
        let e = CniError::from(CacheError::MissingKey {
            network: String::new(),
            container_id: "c".into(),
            ifname: "eth0".into(),
        });
        assert_eq!(e.code, 4);
    }
}
