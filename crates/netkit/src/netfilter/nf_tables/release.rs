//! Releasing NETLINK_NETFILTER sockets without making the runtime wait for the kernel's
//! deferred destroy work.
//!
//! # The kernel mechanism
//!
//! When an nf_tables transaction deletes or updates objects (a rule deleted, a chain flushed,
//! an existing chain "added" again, which the kernel records as an update), packets may still
//! be walking the old objects under RCU. So `nf_tables_commit` does not free them: it moves
//! those transactions to the netns's destroy list and schedules `nf_tables_trans_destroy_work`,
//! which waits for an RCU grace period (`synchronize_rcu`, whole scheduler ticks; how long,
//! measured: docs/benchmarks.md, "Where a chain's ADD used to go") and then frees them.
//! Creations (new tables, chains, rules, sets and elements) are freed from the transaction at
//! once and leave nothing behind.
//!
//! Releasing a bound NETLINK_NETFILTER socket (`netlink_release`, run by the last `close` of
//! it, or by process exit) calls the NETLINK_URELEASE notifier `nft_rcv_nl_event`, which takes
//! the netns's `commit_mutex` and flushes that work (`nf_tables_trans_destroy_flush_work`,
//! i.e. `flush_work`) before it looks for tables owned by the closing port. So the first close
//! after a deleting commit sleeps for the grace period, holding the commit mutex, and the
//! mutex in turn stalls every other commit and every device unregistration in that netns
//! (`nf_tables_netdev_event` takes it too). Process exit changes nothing: the exiting task
//! runs the final `fput` as task work before the parent is notified, so the runtime's
//! `wait4` waits for the flush as well.
//!
//! # What we do
//!
//! * ADDs commit creations only when the shared objects are already as they should be
//!   (the `shared` module's writes), so most commits leave no destroy work and closing is
//!   free.
//! * Once a plugin process (one run by a runtime, which waits for it: `CNI_COMMAND` is set)
//!   has committed a transaction that does leave destroy work ([`note_deferred_destroy`]),
//!   every nf_tables socket it drops is kept open instead ([`release`]): any close would wait
//!   for that work. In a DEL or GC this holds from the start: the work may be another
//!   plugin's (portmap's deletions, just before bridge's DEL looks up its masquerade chain),
//!   and the netns's destroy work is flushed by any socket's release. Long-running processes
//!   (the node agent) and tests close as usual.
//! * At exit (an `atexit` handler, run by `exit()` after the plugin wrote and flushed its
//!   result), the kept sockets are handed to a forked child that holds nothing else: it
//!   closes every other descriptor at once (so the runtime reads EOF on stdout and stderr as
//!   soon as the plugin exits), waits for two grace periods of its own without any lock
//!   (`membarrier(MEMBARRIER_CMD_GLOBAL)` is `synchronize_rcu`), by which time the destroy
//!   work has run, then closes the sockets (the flush then finds nothing to wait for and the
//!   commit mutex is held only for an instant) and exits. The plugin exits at once; the
//!   child, reparented to init (or the runtime's subreaper), lives two grace periods, owns no
//!   nf_tables table (we never set `NFT_TABLE_F_OWNER`), holds no file lock and no state.
//!
//! Everything the plugin committed is in force and visible before its result is printed:
//! only the freeing of deleted objects happens later, as it would anyway.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::detach::close_all_but;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Whether a commit of this plugin process left work for the kernel's deferred destroy.
static DESTROY_PENDING: AtomicBool = AtomicBool::new(false);
/// Sockets dropped since then, closed at exit by [`hand_off`].
static KEPT: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());
/// More sockets than a plugin opens: past this, they are closed at once (and wait).
const MAX_KEPT: usize = 64;
static AT_EXIT: Once = Once::new();

/// Records that a commit left destroy work: from now on a plugin process keeps the sockets
/// it drops for exit.
pub(crate) fn note_deferred_destroy() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        return;
    }
    DESTROY_PENDING.store(true, Ordering::SeqCst);
    hand_off_at_exit();
}

fn hand_off_at_exit() {
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain extern "C" function; atexit has no other precondition.
        // If registration fails the sockets are simply closed by the exit itself.
        unsafe { libc::atexit(release_at_exit) };
    });
}

/// Whether this plugin process keeps its nf_tables sockets for exit: once a commit of its
/// own left destroy work, and throughout a DEL or GC, whose chain runs removals one plugin
/// after the other: portmap's or the firewall's deletions leave destroy work in the netns,
/// which the next plugin's first close (bridge's masquerade lookup) would wait for.
pub fn keeps_sockets_for_exit() -> bool {
    DESTROY_PENDING.load(Ordering::SeqCst) || in_removal()
}

fn in_removal() -> bool {
    matches!(
        std::env::var_os("CNI_COMMAND")
            .as_deref()
            .and_then(|c| c.to_str()),
        Some("DEL" | "GC")
    )
}

/// Closes `sock` now, or keeps it for [`hand_off`] at exit when closing would wait.
pub(crate) fn release(sock: netlink_sys::Socket) {
    if !keeps_sockets_for_exit() {
        return drop(sock);
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() >= MAX_KEPT {
        return drop(sock);
    }
    hand_off_at_exit();
    // SAFETY: into_raw_fd hands over sole ownership of a valid open descriptor.
    kept.push(unsafe { OwnedFd::from_raw_fd(sock.into_raw_fd()) });
}

extern "C" fn release_at_exit() {
    let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    // The child needs no reaping from us: we are exiting.
    let _ = hand_off(kept);
}

/// Forks a child that closes `fds` after a grace period, and closes our copies (which does
/// not release the sockets, the child still holding them). Returns the child's pid; with
/// `fork` failing, the sockets are closed here (waiting, as without this module).
pub(crate) fn hand_off(fds: Vec<OwnedFd>) -> Option<libc::pid_t> {
    if fds.is_empty() {
        return None;
    }
    let mut raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    raw.sort_unstable();
    // SAFETY: the child only makes async-signal-safe calls (close_range, close, membarrier,
    // _exit) on data allocated before the fork, so it is sound in a multithreaded process.
    match unsafe { libc::fork() } {
        0 => unsafe {
            close_all_but(&raw);
            // Not holding the commit mutex while the destroy work's grace period elapses.
            // Twice: the work starts its own grace period only once a kworker runs it, which
            // may be after ours began; a close before it ends flushes it holding the commit
            // mutex, which a link's unregistration (under RTNL) then waits for.
            libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
            libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
            for fd in &raw {
                libc::close(*fd);
            }
            libc::_exit(0)
        },
        -1 => {
            drop(fds);
            None
        }
        pid => {
            drop(fds);
            Some(pid)
        }
    }
}

/// `MEMBARRIER_CMD_GLOBAL` (linux/membarrier.h): returns after an RCU grace period.
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_off_closes_in_a_child_that_exits() {
        // Any descriptor will do: the child closes it and exits 0.
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let pid = hand_off(vec![OwnedFd::from(a)]).expect("fork");
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        // Both copies of `a` are closed: reading `b` gives EOF.
        use std::io::Read;
        let mut buf = [0u8; 1];
        assert_eq!((&b).read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn nothing_to_hand_off_forks_nothing() {
        assert_eq!(hand_off(Vec::new()), None);
    }
}
