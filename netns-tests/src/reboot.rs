//! Reboots of the node, faked: a mount namespace (slave of the host's, so netns files made
//! later appear in it) where `/proc/sys/kernel/random/boot_id` and `/proc/stat` are replaced by
//! bind mounts. Every plugin, cnitool or daemon started through [`FakeBoot::prefix`] sees a new
//! boot after [`FakeBoot::reboot`]: a new boot_id, and a `btime` later than every file written
//! before. What a reboot does to the kernel (the host netns and its links, rules and pods gone)
//! is the test's to do: usually a new host netns, and the pods' netns deleted (the crash).
//!
//! State that is to be judged by its boot must be on a filesystem that outlives a boot
//! (a file on tmpfs is of this boot whatever it says): [`disk_temp_root`] finds one for the
//! test's [`crate::TempDir`]s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::TempDir;

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
const PROC_STAT: &str = "/proc/stat";

/// `statfs.f_type` of the filesystems whose content dies with the boot.
const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// Whether `path` is on tmpfs or ramfs.
pub fn dies_with_the_boot(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as u32;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// A directory for temporary state on a filesystem that outlives a boot: the system's temp
/// dir, else `/var/tmp`, else the workspace's `target/`; `None` when all die with the boot.
pub fn disk_temp_root() -> Option<PathBuf> {
    [
        std::env::temp_dir(),
        PathBuf::from("/var/tmp"),
        crate::workspace_root().join("target"),
    ]
    .into_iter()
    .find(|d| d.is_dir() && !dies_with_the_boot(d))
}

/// Seconds since the epoch, now.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The holder of the mount namespace whose boot is faked; killed (taking the namespace and
/// its bind mounts with it) on drop.
pub struct FakeBoot {
    holder: Child,
    files: TempDir,
    boots: u32,
    boot_id: String,
}

impl FakeBoot {
    /// A mount namespace that, until the first [`FakeBoot::reboot`], sees the real boot.
    pub fn new() -> FakeBoot {
        let files = TempDir::new("fake-boot");
        let ready = files.join("ready");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "slave", "--", "sh", "-c"])
            .arg("touch \"$1\"; exec sleep 86400")
            .arg("holder")
            .arg(&ready)
            .stdin(Stdio::null());
        let holder = crate::private_host::die_with_parent(&mut cmd)
            .spawn()
            .expect("spawn unshare");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "the mount holder did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        let boot_id = std::fs::read_to_string(BOOT_ID)
            .expect("read boot_id")
            .trim()
            .to_string();
        FakeBoot {
            holder,
            files,
            boots: 0,
            boot_id,
        }
    }

    /// `nsenter` into the namespace: the prefix of a command line that sees the faked boot.
    pub fn prefix(&self) -> Vec<String> {
        ["nsenter", "-t", &self.holder.id().to_string(), "-m", "--"]
            .map(String::from)
            .to_vec()
    }

    /// `argv` run inside the namespace.
    pub fn command(&self, argv: &[&str]) -> Command {
        let prefix = self.prefix();
        let mut cmd = Command::new(&prefix[0]);
        cmd.args(&prefix[1..]).args(argv);
        cmd
    }

    /// The boot_id the namespace sees.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// A reboot, as far as files can tell: a new boot_id, and a boot time after every file
    /// written so far (the next second; this waits until the clock has passed it, so that
    /// what is written from now on is of the new boot). Returns the new boot_id.
    pub fn reboot(&mut self) -> String {
        self.boots += 1;
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
            .expect("a random UUID")
            .trim()
            .to_string();
        let btime = now_secs() + 1;
        let stat = std::fs::read_to_string(PROC_STAT).expect("read /proc/stat");
        let stat: String = stat
            .lines()
            .map(|l| {
                if l.starts_with("btime ") {
                    format!("btime {btime}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let id_file = self.files.join(format!("boot_id.{}", self.boots));
        let stat_file = self.files.join(format!("stat.{}", self.boots));
        std::fs::write(&id_file, format!("{boot_id}\n")).expect("write the boot_id");
        std::fs::write(&stat_file, stat).expect("write the stat");
        for (file, target) in [(&id_file, BOOT_ID), (&stat_file, PROC_STAT)] {
            // The previous fake goes first (nothing is mounted there the first time).
            let _ = self.command(&["umount", target]).output();
            let out = self
                .command(&["mount", "--bind", file.to_str().unwrap(), target])
                .output()
                .expect("run mount");
            assert!(
                out.status.success(),
                "bind-mount {} on {target}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let seen = self.command(&["cat", BOOT_ID]).output().expect("cat");
        assert_eq!(String::from_utf8_lossy(&seen.stdout).trim(), boot_id);
        while now_secs() < btime {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.boot_id = boot_id.clone();
        boot_id
    }
}

impl Default for FakeBoot {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FakeBoot {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
