//! The physical floor of "exec + VERSION": the smallest executable that gives the same
//! answer, a static x86-64 ELF of one loadable segment whose code makes two system calls
//! (`write(1, answer)`, `exit_group(0)`). Timing it beside a plugin's VERSION shows what of
//! the figure is the kernel's exec, exit and the wake-ups around them, which no plugin can
//! go under, and what is the plugin's own.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where the kernel maps the segment (the usual base of a non-PIE executable).
const BASE: u64 = 0x40_0000;
const ELF_HEADER: usize = 64;
const PROGRAM_HEADER: usize = 56;

/// The executable's bytes: ELF header, one PT_LOAD program header, code, then `answer`.
/// None when `answer` is too long for the code's 32-bit length or on another architecture.
pub fn floor_executable(answer: &[u8]) -> Option<Vec<u8>> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let len = u32::try_from(answer.len()).ok()?;
    let mut code = Vec::new();
    code.extend_from_slice(&[0xb8, 1, 0, 0, 0]); // mov eax, 1 (write)
    code.extend_from_slice(&[0xbf, 1, 0, 0, 0]); // mov edi, 1 (stdout)
    let lea_at = code.len();
    code.extend_from_slice(&[0x48, 0x8d, 0x35, 0, 0, 0, 0]); // lea rsi, [rip + answer]
    code.push(0xba); // mov edx, len
    code.extend_from_slice(&len.to_le_bytes());
    code.extend_from_slice(&[0x0f, 0x05]); // syscall
    code.extend_from_slice(&[0xb8, 231, 0, 0, 0]); // mov eax, 231 (exit_group)
    code.extend_from_slice(&[0x31, 0xff]); // xor edi, edi
    code.extend_from_slice(&[0x0f, 0x05]); // syscall
                                           // The answer follows the code: its offset from the end of the lea instruction.
    let rel = i32::try_from(code.len() - (lea_at + 7)).ok()?;
    code[lea_at + 3..lea_at + 7].copy_from_slice(&rel.to_le_bytes());

    let total = (ELF_HEADER + PROGRAM_HEADER + code.len() + answer.len()) as u64;
    let entry = BASE + (ELF_HEADER + PROGRAM_HEADER) as u64;
    let mut elf = Vec::with_capacity(total as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type: ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // e_machine: x86-64
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&entry.to_le_bytes()); // e_entry
    elf.extend_from_slice(&(ELF_HEADER as u64).to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    elf.extend_from_slice(&(ELF_HEADER as u16).to_le_bytes()); // e_ehsize
    elf.extend_from_slice(&(PROGRAM_HEADER as u16).to_le_bytes()); // e_phentsize
    elf.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    elf.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
                                    // The one segment: the whole file, readable and executable, at BASE.
    elf.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // p_flags: R + X
    elf.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    elf.extend_from_slice(&BASE.to_le_bytes()); // p_vaddr
    elf.extend_from_slice(&BASE.to_le_bytes()); // p_paddr
    elf.extend_from_slice(&total.to_le_bytes()); // p_filesz
    elf.extend_from_slice(&total.to_le_bytes()); // p_memsz
    elf.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    elf.extend_from_slice(&code);
    elf.extend_from_slice(answer);
    Some(elf)
}

/// Writes [`floor_executable`] as `dir/name`, executable; its path, or None.
pub fn write_floor_executable(dir: &Path, name: &str, answer: &[u8]) -> Option<PathBuf> {
    let bytes = floor_executable(answer)?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).ok()?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).ok()?;
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_executable_prints_exactly_the_answer_and_succeeds() {
        if !cfg!(target_arch = "x86_64") {
            assert!(floor_executable(b"x").is_none());
            return;
        }
        let dir = crate::TempDir::new("exec-floor");
        let answer = br#"{"cniVersion":"1.1.0","supportedVersions":["0.1.0","1.1.0"]}"#;
        let path = write_floor_executable(dir.path(), "floor", answer).unwrap();
        let out = std::process::Command::new(&path).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, answer);
        assert!(out.stderr.is_empty());
        // Small enough to fit in the page it is mapped from.
        assert!(std::fs::metadata(&path).unwrap().len() < 4096);
    }
}
