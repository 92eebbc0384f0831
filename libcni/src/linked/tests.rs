use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;
use crate::invoke::start_plugin_linked;
use crate::CniError;

const STAMP: BuildStamp = *b"0123456789abcdef";

/// A scratch directory of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("libcni-linked-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes an executable file.
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One ELF note, laid out as the format says (4-byte padding).
fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend((name.len() as u32).to_ne_bytes());
    out.extend((desc.len() as u32).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    for part in [name, desc] {
        out.extend(part);
        out.resize(out.len().next_multiple_of(4), 0);
    }
    out
}

/// A 64-bit ELF image whose program headers are `(type, offset, size)`, followed by `body`
/// at offset `body_at`.
fn elf(phdrs: &[(u32, u64, u64)], body_at: usize, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = ELF_CLASS;
    out[5] = ELF_DATA;
    out[6] = 1;
    out[32..40].copy_from_slice(&64u64.to_ne_bytes());
    out[54..56].copy_from_slice(&56u16.to_ne_bytes());
    out[56..58].copy_from_slice(&(phdrs.len() as u16).to_ne_bytes());
    for (kind, offset, size) in phdrs {
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&kind.to_ne_bytes());
        ph[8..16].copy_from_slice(&offset.to_ne_bytes());
        ph[32..40].copy_from_slice(&size.to_ne_bytes());
        out.extend(ph);
    }
    if out.len() < body_at {
        out.resize(body_at, 0);
    }
    out.extend(body);
    out
}

/// An image with one note segment at 512 holding a GNU note and then `ours`.
fn image_with(ours: &[u8]) -> Vec<u8> {
    let mut notes = note(b"GNU\0", 3, &[7; 20]);
    notes.extend(ours);
    elf(
        &[(1, 0, 0), (PT_NOTE, 512, notes.len() as u64)],
        512,
        &notes,
    )
}

#[cfg(target_pointer_width = "64")]
#[test]
fn the_stamp_is_found_among_other_notes_and_program_headers() {
    let dir = Scratch::new("found");
    let ours = note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP);
    let path = dir.write("plugin", &image_with(&ours));
    assert_eq!(file_stamp(&path), Some(STAMP));

    // Notes past the first page are read from the file.
    let far = elf(&[(PT_NOTE, 9000, ours.len() as u64)], 9000, &ours);
    assert_eq!(file_stamp(&dir.write("far", &far)), Some(STAMP));
}

#[cfg(target_pointer_width = "64")]
#[test]
fn the_note_struct_is_laid_out_as_an_elf_note() {
    let expected = note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP);
    let built = StampNote::new(STAMP);
    assert_eq!(std::mem::size_of::<StampNote>(), expected.len());
    assert_eq!(std::mem::align_of::<StampNote>(), 4);
    let mut bytes = Vec::new();
    bytes.extend(built.name_len.to_ne_bytes());
    bytes.extend(built.desc_len.to_ne_bytes());
    bytes.extend(built.kind.to_ne_bytes());
    bytes.extend(built.name);
    bytes.extend(built.desc);
    assert_eq!(bytes, expected);
}

#[cfg(target_pointer_width = "64")]
#[test]
fn files_that_are_not_our_build_carry_no_stamp() {
    let dir = Scratch::new("none");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("script", b"#!/bin/sh\nexec true\n".to_vec()),
        ("empty", Vec::new()),
        ("header-only", image_with(&[])[..40].to_vec()),
        (
            "other-owner",
            image_with(&note(b"ferrocnj\0", NT_BUILD_STAMP, &STAMP)),
        ),
        ("other-type", image_with(&note(b"ferrocni\0", 2, &STAMP))),
        (
            "short-stamp",
            image_with(&note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP[..8])),
        ),
        (
            "segment-past-the-end",
            elf(&[(PT_NOTE, 1 << 40, 40)], 0, &[]),
        ),
        (
            "huge-segment",
            elf(&[(PT_NOTE, 64, MAX_NOTE_SEGMENT + 1)], 0, &[0; 64]),
        ),
        (
            "note-longer-than-its-segment",
            elf(&[(PT_NOTE, 120, 24)], 120, &{
                let mut n = note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP);
                n[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
                n
            }),
        ),
    ];
    for (name, bytes) in cases {
        assert_eq!(file_stamp(&dir.write(name, &bytes)), None, "{name}");
    }
    let mut many = image_with(&[]);
    many[56..58].copy_from_slice(&((MAX_PROGRAM_HEADERS + 1) as u16).to_ne_bytes());
    assert_eq!(file_stamp(&dir.write("many-headers", &many)), None);
    assert_eq!(file_stamp(&dir.0.join("missing")), None);
}

/// The linked plugin of the tests: prints a result naming the call's command and container,
/// or fails with the spec's error JSON when the config asks for it.
fn dispatch(env: &CallEnv<'_>, stdin: &[u8]) -> Outcome {
    if stdin.starts_with(b"fail") {
        return Outcome::Fail(r#"{"code":11,"msg":"no more addresses","details":"pool"}"#.into());
    }
    let result = serde_json::json!({
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.1.2.3/24"}],
        "dns": {"domain": format!("{}.{}", env.var("CNI_COMMAND"), env.var("CNI_CONTAINERID"))},
    });
    Outcome::Print(result.to_string())
}

const LINKED: LinkedPlugin = LinkedPlugin {
    plugin_type: "fake-ipam",
    stamp: STAMP,
    dispatch,
};

fn call_env(command: &str) -> Vec<(String, String)> {
    vec![
        ("CNI_COMMAND".into(), command.into()),
        ("CNI_CONTAINERID".into(), "c1".into()),
    ]
}

#[cfg(target_pointer_width = "64")]
#[test]
fn a_binary_of_the_same_build_is_answered_in_process() {
    let dir = Scratch::new("answered");
    // An ELF image that cannot be executed: only an in-process answer can succeed.
    let stamped = image_with(&note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP));
    let plugin = dir.write("fake-ipam", &stamped);

    let linked = [LINKED];
    let result = start_plugin_linked(&linked, &plugin, b"{}", &call_env("ADD"))
        .and_then(|r| r.finish_with_result(b"{}"))
        .unwrap();
    assert_eq!(result["dns"]["domain"], "ADD.c1");
    assert_eq!(result["ips"][0]["address"], "10.1.2.3/24");

    // A failure is decoded as an executed plugin's error JSON.
    let err: CniError = start_plugin_linked(&linked, &plugin, b"fail", &call_env("ADD"))
        .and_then(|r| r.finish())
        .unwrap_err();
    assert_eq!((err.code, err.msg.as_str()), (11, "no more addresses"));
    assert_eq!(err.details, "pool");
}

#[cfg(target_pointer_width = "64")]
#[test]
fn other_binaries_are_executed() {
    let dir = Scratch::new("executed");
    let linked = [LINKED];
    // Another build: executed, and this image is no program.
    let other = image_with(&note(b"ferrocni\0", NT_BUILD_STAMP, b"fedcba9876543210"));
    let plugin = dir.write("fake-ipam", &other);
    let err = start_plugin_linked(&linked, &plugin, b"{}", &call_env("ADD"))
        .and_then(|r| r.finish())
        .unwrap_err();
    assert!(err.to_string().contains("failed to execute"), "{err}");

    // The same build under another type's name is not ours to answer either.
    let stamped = image_with(&note(b"ferrocni\0", NT_BUILD_STAMP, &STAMP));
    let renamed = dir.write("other-ipam", &stamped);
    assert!(
        start_plugin_linked(&linked, &renamed, b"{}", &call_env("ADD"))
            .and_then(|r| r.finish())
            .is_err()
    );

    // A real program under the plugin's name runs as usual.
    let script = dir.write(
        "fake-ipam",
        b"#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[]}'\n",
    );
    let result = start_plugin_linked(&linked, &script, b"{}", &call_env("ADD"))
        .and_then(|r| r.finish_with_result(b"{}"))
        .unwrap();
    assert_eq!(result["ips"], serde_json::json!([]));
}

#[test]
fn the_call_env_sets_the_call_variables_over_ours() {
    let vars = vec![("CNI_COMMAND".to_string(), "DEL".to_string())];
    let env = CallEnv(&vars);
    assert_eq!(env.var("CNI_COMMAND"), "DEL");
    assert!(env.is_set("CNI_COMMAND"));
    assert_eq!(env.var("PATH"), std::env::var("PATH").unwrap_or_default());
    assert!(!env.is_set("LIBCNI_LINKED_TEST_UNSET_VARIABLE"));
}
