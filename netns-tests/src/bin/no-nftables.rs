//! `no-nftables <command> [args]`: runs a command as if the kernel had no nf_tables. A seccomp
//! filter (inherited by every child) makes `socket(AF_NETLINK, _, NETLINK_NETFILTER)` fail
//! with EPROTONOSUPPORT, which is what a kernel without nfnetlink answers. Used by
//! `netns-tests/tests/faults_env.rs`; changes nothing outside the process tree it starts.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
const NETLINK_NETFILTER: u32 = 12;

/// Offsets in `struct seccomp_data`: nr, arch, then args[] (u64 each; low halves read).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16;
const OFF_ARG2: u32 = 32;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// `if A == k` fall through, else skip `skip` instructions.
fn jeq_else_skip(k: u32, skip: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: 0,
        jf: skip,
        k,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: no-nftables <command> [args]");
        return ExitCode::from(2);
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    // Every non-matching test jumps to the last instruction (ALLOW).
    let filter = [
        stmt(load, OFF_ARCH),
        jeq_else_skip(AUDIT_ARCH, 7),
        stmt(load, OFF_NR),
        jeq_else_skip(libc::SYS_socket as u32, 5),
        stmt(load, OFF_ARG0),
        jeq_else_skip(libc::AF_NETLINK as u32, 3),
        stmt(load, OFF_ARG2),
        jeq_else_skip(NETLINK_NETFILTER, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with valid arguments; `prog` points at `filter`, alive for the call.
    let installed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) == 0
    };
    if !installed {
        eprintln!(
            "no-nftables: cannot install the seccomp filter: {}",
            std::io::Error::last_os_error()
        );
        return ExitCode::from(1);
    }
    let e = Command::new(program).args(rest).exec();
    eprintln!("no-nftables: cannot run {program}: {e}");
    ExitCode::from(1)
}
