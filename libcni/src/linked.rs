//! Plugins linked into the calling binary: a plugin that delegates (bridge to its IPAM plugin)
//! may answer a delegated call in-process instead of executing the delegate, when the binary
//! found on `CNI_PATH` is the very build of that plugin.
//!
//! Why: an exec of the delegate (its page faults, its exit) costs more than the IPAM work
//! itself, on every pod's ADD and DEL. In-process, the call goes through the same skeleton
//! ([`crate::skel::dispatch`]) with the same environment and stdin, and the caller decodes its
//! output as it decodes an executed plugin's, so it sees the same answer.
//!
//! "The very build" is proven by a build stamp: the delegate binary carries it in an ELF note
//! ([`StampNote`], section `.note.ferrocni`), the linked copy knows it as a constant, and both
//! come from one hash of the sources they are built from. Anything else on `CNI_PATH` under
//! that name (another implementation, another version, a wrapper script) has no such note or
//! another stamp, and is executed as usual.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::skel::{Env, Outcome};

/// The hash of the sources a plugin is built from (see [`StampNote`]).
pub type BuildStamp = [u8; 16];

/// The note's owner name, NUL-terminated and padded to 4 bytes as the ELF note format wants.
const NOTE_NAME: [u8; 12] = *b"ferrocni\0\0\0\0";
/// The owner name's length, its NUL included.
const NOTE_NAME_LEN: u32 = 9;
/// The note type of a build stamp.
const NT_BUILD_STAMP: u32 = 1;
const PT_NOTE: u32 = 4;
/// How much of a file's start is read at once: the ELF header, the program headers and,
/// in our binaries, the notes.
const HEAD_LEN: usize = 4096;
/// Bounds on what a file may claim, so that no input makes the reader allocate or loop much.
const MAX_PROGRAM_HEADERS: usize = 64;
const MAX_NOTE_SEGMENT: u64 = 4096;

/// An ELF note holding a [`BuildStamp`]. A plugin binary places one in its `.note.ferrocni`
/// section (`#[used]`, so that neither LTO nor the linker drops it; the linker puts note
/// sections in a `PT_NOTE` segment near the file's start):
///
/// ```ignore
/// #[used]
/// #[link_section = ".note.ferrocni"]
/// static STAMP_NOTE: StampNote = StampNote::new(STAMP);
/// ```
#[repr(C, align(4))]
// The fields are read from the file (by [`file_stamp`]), never in Rust.
#[allow(dead_code)]
pub struct StampNote {
    name_len: u32,
    desc_len: u32,
    kind: u32,
    name: [u8; 12],
    desc: BuildStamp,
}

impl StampNote {
    pub const fn new(stamp: BuildStamp) -> StampNote {
        StampNote {
            name_len: NOTE_NAME_LEN,
            desc_len: std::mem::size_of::<BuildStamp>() as u32,
            kind: NT_BUILD_STAMP,
            name: NOTE_NAME,
            desc: stamp,
        }
    }
}

/// The build stamp an ELF file carries, if it is a binary of our build for this machine's
/// byte order and word size (anything else gives `None`: it is not one of ours).
pub fn file_stamp(path: &Path) -> Option<BuildStamp> {
    let file = File::open(path).ok()?;
    let mut head = vec![0u8; HEAD_LEN];
    let len = read_up_to(&file, &mut head, 0)?;
    head.truncate(len);
    let read = |offset: u64, size: usize| -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        if let Some(bytes) = start.checked_add(size).and_then(|end| head.get(start..end)) {
            return Some(bytes.to_vec());
        }
        let mut buf = vec![0u8; size];
        (read_up_to(&file, &mut buf, offset)? == size).then_some(buf)
    };
    stamp_in(&read)
}

/// Reads as much of `buf` as the file holds from `offset` on.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(done)
}

/// The ELF class and data encoding of this machine's binaries.
const ELF_CLASS: u8 = if cfg!(target_pointer_width = "64") {
    2
} else {
    1
};
const ELF_DATA: u8 = if cfg!(target_endian = "little") { 1 } else { 2 };

/// Finds our stamp note in an ELF image, `read(offset, len)` giving its bytes.
fn stamp_in(read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<BuildStamp> {
    let ident = read(0, 16)?;
    if ident[..4] != *b"\x7fELF" || ident[4] != ELF_CLASS || ident[5] != ELF_DATA {
        return None;
    }
    let wide = ELF_CLASS == 2;
    // (e_phoff, e_phentsize, e_phnum) offsets, and one program header's size.
    let (phoff_at, phentsize_at, phnum_at, phdr_len) = if wide {
        (32, 54, 56, 56)
    } else {
        (28, 42, 44, 32)
    };
    let header = read(0, if wide { 64 } else { 52 })?;
    let phoff = if wide {
        u64_at(&header, phoff_at)?
    } else {
        u64::from(u32_at(&header, phoff_at)?)
    };
    let phentsize = usize::from(u16_at(&header, phentsize_at)?);
    let phnum = usize::from(u16_at(&header, phnum_at)?);
    if phentsize != phdr_len || phnum > MAX_PROGRAM_HEADERS {
        return None;
    }
    let phdrs = read(phoff, phnum * phentsize)?;
    for phdr in phdrs.chunks_exact(phentsize) {
        if u32_at(phdr, 0)? != PT_NOTE {
            continue;
        }
        let (offset, size) = if wide {
            (u64_at(phdr, 8)?, u64_at(phdr, 32)?)
        } else {
            (u64::from(u32_at(phdr, 4)?), u64::from(u32_at(phdr, 16)?))
        };
        if size > MAX_NOTE_SEGMENT {
            continue;
        }
        let notes = read(offset, usize::try_from(size).ok()?)?;
        if let Some(stamp) = stamp_in_notes(&notes) {
            return Some(stamp);
        }
    }
    None
}

/// Our stamp among the notes of one `PT_NOTE` segment.
fn stamp_in_notes(mut notes: &[u8]) -> Option<BuildStamp> {
    let padded = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let name_len = usize::try_from(u32_at(notes, 0)?).ok()?;
        let desc_len = usize::try_from(u32_at(notes, 4)?).ok()?;
        let kind = u32_at(notes, 8)?;
        let name_end = 12usize.checked_add(padded(name_len)?)?;
        let desc_end = name_end.checked_add(padded(desc_len)?)?;
        let name = notes.get(12..12 + name_len)?;
        let desc = notes.get(name_end..name_end + desc_len)?;
        if kind == NT_BUILD_STAMP && name == &NOTE_NAME[..NOTE_NAME_LEN as usize] {
            return desc.try_into().ok();
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// A plugin linked into this binary, able to answer for the binary of its type on `CNI_PATH`
/// when that binary carries `stamp`.
pub struct LinkedPlugin {
    /// The plugin's type: the file name it is found under on `CNI_PATH`.
    pub plugin_type: &'static str,
    /// The build stamp its binary carries.
    pub stamp: BuildStamp,
    /// Its skeleton: what the binary would print for this environment and stdin.
    pub dispatch: fn(&CallEnv<'_>, &[u8]) -> Outcome,
}

impl LinkedPlugin {
    /// Whether this plugin may answer for the executable at `path`: same type, same build.
    pub fn answers_for(&self, path: &Path) -> bool {
        path.file_name().is_some_and(|n| n == self.plugin_type)
            && file_stamp(path) == Some(self.stamp)
    }
}

/// The environment an executed delegate would see: ours, with the call's variables
/// (`CNI_COMMAND` & co.) set over it.
pub struct CallEnv<'a>(pub &'a [(String, String)]);

impl CallEnv<'_> {
    fn get(&self, name: &str) -> Option<String> {
        match self.0.iter().rev().find(|(k, _)| k == name) {
            Some((_, v)) => Some(v.clone()),
            None => std::env::var(name).ok(),
        }
    }
}

impl Env for CallEnv<'_> {
    fn var(&self, name: &str) -> String {
        self.get(name).unwrap_or_default()
    }
    fn is_set(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name) || std::env::var_os(name).is_some()
    }
}

#[cfg(test)]
mod tests;
