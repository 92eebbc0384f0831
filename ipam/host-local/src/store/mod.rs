//! The reference-compatible disk store: `<dataDir>/<network>/` holding one file per reserved
//! address (`<containerID>\r\n<ifname>`), `last_reserved_ip.<set>` and `lock`, plus dot-files
//! of ours whose names the reference never parses as addresses: `.ferrocni-index` (see
//! [`index`]; its content never equals a lease's), `.ferrocni-index.new` (during its rewrite),
//! `.ferrocni-tmp` (a lease being written; a crashed writer's leftover is at worst
//! released by the reference's DEL of that container, which is harmless) and `.ferrocni-boot`
//! (`ferrocni-boot <boot_id>`, which no lease content equals either).
//!
//! A [`Store`] holds the exclusive flock on `lock` (the same lock the reference takes) from
//! open until it is dropped, so a whole ADD/DEL/CHECK/GC is one critical section.
//! Reservations are crash-safe: the lease content is written to `.ferrocni-tmp`, then
//! hard-linked to the address name (link fails if the name exists: exclusive and atomic), so a
//! crashed process never leaves an empty or partial lease file. There is no fsync, as in the
//! reference: it would put the disk's flush latency on every ADD while the store lock is held,
//! which serialises concurrent ADDs on the disk. A power loss can at worst leave a lease file
//! empty; no container of before the reboot survives it, and an empty lease is reclaimed. `.ferrocni-tmp` only exists while its writer holds
//! the lock, so whoever takes the lock next removes a crashed writer's leftover.
//!
//! Leases belong to a boot of the node: ours carry the boot that wrote them (the temp file is
//! stamped before it is linked, see `libcni::boot`), and `.ferrocni-boot` names the boot whose
//! first call has already freed the leases of earlier boots ([`Store::forget_earlier_boots`]).

pub mod fs;
pub mod index;
pub mod lease;

use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::IpamError;
use fs::{Dir, EntryRead, FileLock};
use index::{Fingerprint, Index};
pub use lease::Owner;
use libcni::boot::Boot;

pub const LOCK_FILE: &str = "lock";
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
pub const INDEX_FILE: &str = ".ferrocni-index";
pub const INDEX_NEW_FILE: &str = ".ferrocni-index.new";
pub const TEMP_FILE: &str = ".ferrocni-tmp";
pub const BOOT_FILE: &str = ".ferrocni-boot";

/// Names that can be leases: they parse as an IP address (what the reference writes).
pub fn is_lease_name(name: &str) -> bool {
    !name.starts_with('.') && name.parse::<IpAddr>().is_ok()
}

pub struct Store {
    dir: Dir,
    /// None when the cache cannot be used; every call then rescans.
    index_file: Option<std::fs::File>,
    /// The cached journal as read, when valid for the current store state (else empty).
    journal: Vec<u8>,
    journal_valid: bool,
    /// Records of this call, appended to the journal on commit.
    pending: Vec<u8>,
    /// The full map, once something needed it (replayed journal or rescan).
    full: Option<Index>,
    /// The journal must be rewritten from `full` (after a rescan).
    needs_snapshot: bool,
    /// This call changed the store (a new marker is needed).
    changed: bool,
    /// Number of range sets (how many `last_reserved_ip.<n>` files the fingerprint covers).
    sets: usize,
    /// The `last_reserved_ip.<set>` contents (`None`: missing or not a file), read once per
    /// call: they are both round-robin hints and part of the fingerprint, and nobody else
    /// writes them while we hold the lock. `None` until read, and again after a failed write.
    hints: Option<Vec<Option<Vec<u8>>>>,
    /// Content currently in `.ferrocni-tmp`, if we created it.
    temp_content: Option<String>,
    /// Addresses found taken by this call; past a threshold the full map is loaded so known
    /// leases are skipped without a syscall (a nearly full, wrapped-around range).
    taken_seen: usize,
    _lock: FileLock,
}

/// Spare capacity for a call's journal records and closing marker (one ADD or DEL writes
/// well under this; more only costs one reallocation).
const APPEND_ROOM: usize = 1024;

/// How many taken addresses a call probes before loading the full map to skip them.
const PROBES_BEFORE_FULL_MAP: usize = 64;

fn io_err(op: &'static str, path: &Path, source: io::Error) -> IpamError {
    IpamError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Which ownership a lookup matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// `<cid>\r\n<ifname>` leases.
    Exact,
    /// Legacy `<cid>` leases.
    Legacy,
    /// Either (what the reference's GetByID and FindByID accept).
    Either,
}

impl Store {
    /// Opens (creating when `create`) `<data_dir>/<network>/`, takes the lock and loads the
    /// index. Returns None when the store does not exist and `create` is false.
    pub fn open(
        data_dir: &Path,
        network: &str,
        create: bool,
        sets: usize,
    ) -> Result<Option<Store>, IpamError> {
        crate::validate::network_name(network)?;
        if create {
            std::fs::create_dir_all(data_dir)
                .map_err(|e| io_err("create data directory", data_dir, e))?;
        }
        let parent = match Dir::open_path(data_dir) {
            Ok(d) => d,
            Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("open data directory", data_dir, e)),
        };
        let store_path = data_dir.join(network);
        if create {
            parent
                .make_dir(network, 0o755)
                .map_err(|e| io_err("create store directory", &store_path, e))?;
        }
        let dir = match Dir::open_child(&parent, network) {
            Ok(d) => d,
            Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                return Err(IpamError::StoreNotADirectory(store_path))
            }
            Err(e) => return Err(io_err("open store directory", &store_path, e)),
        };
        let lock_file = dir
            .open_file(LOCK_FILE, libc::O_RDONLY | libc::O_CREAT, 0o750)
            .map_err(|e| io_err("open lock file", &store_path.join(LOCK_FILE), e))?;
        let lock = FileLock::acquire(lock_file)
            .map_err(|e| io_err("lock", &store_path.join(LOCK_FILE), e))?;
        // A leftover temp file can only come from a writer that crashed while holding the lock.
        dir.remove(TEMP_FILE)
            .map_err(|e| io_err("remove stale temp file", &store_path.join(TEMP_FILE), e))?;
        let index_file = open_index(&dir, INDEX_FILE, 0);
        let mut store = Store {
            dir,
            index_file,
            journal: Vec::new(),
            journal_valid: false,
            pending: Vec::new(),
            full: None,
            needs_snapshot: false,
            changed: false,
            sets,
            hints: None,
            temp_content: None,
            taken_seen: 0,
            _lock: lock,
        };
        store.load_index()?;
        Ok(Some(store))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the journal matched the store when it was opened (no rescan was needed).
    #[cfg(test)]
    pub fn index_was_valid(&self) -> bool {
        self.journal_valid
    }

    fn fingerprint(&mut self) -> Result<Fingerprint, IpamError> {
        let st = self
            .dir
            .stat()
            .map_err(|e| io_err("stat store directory", self.dir.path(), e))?;
        let mut hints = Vec::new();
        for content in self.hints() {
            match content {
                Some(content) => {
                    hints.extend_from_slice(&(content.len() as u64).to_le_bytes());
                    hints.extend_from_slice(content);
                }
                None => hints.extend_from_slice(&u64::MAX.to_le_bytes()),
            }
        }
        Ok(Fingerprint::of(&st, index::checksum(&hints)))
    }

    /// The `last_reserved_ip.<set>` contents, read on first use (see [`Store::hints`]'s field).
    fn hints(&mut self) -> &[Option<Vec<u8>>] {
        let (dir, sets) = (&self.dir, self.sets);
        self.hints.get_or_insert_with(|| {
            (0..sets)
                .map(
                    |set| match dir.read_entry(&format!("{LAST_RESERVED_PREFIX}{set}")) {
                        Ok(EntryRead::File(content)) => Some(content),
                        _ => None,
                    },
                )
                .collect()
        })
    }

    fn load_index(&mut self) -> Result<(), IpamError> {
        let fp = self.fingerprint()?;
        let mut data = Vec::new();
        let valid = match &self.index_file {
            Some(f) => {
                // Room for this call's records and marker too, so that appending them does
                // not copy the whole journal into a bigger buffer.
                let len = f.metadata().map_or(0, |m| m.len() as usize);
                data.reserve(len + APPEND_ROOM);
                (&*f).read_to_end(&mut data).is_ok() && index::is_valid(&data, &fp)
            }
            None => false,
        };
        if valid {
            self.journal = data;
            self.journal_valid = true;
            Ok(())
        } else {
            self.rescan()
        }
    }

    /// Rebuilds the index from the lease files (reads every one of them).
    pub fn rescan(&mut self) -> Result<(), IpamError> {
        let names = self
            .dir
            .list()
            .map_err(|e| io_err("list store directory", self.dir.path(), e))?;
        let mut index = Index::default();
        for name in names.into_iter().filter(|n| is_lease_name(n)) {
            if let Some(owner) = self.read_owner(&name)? {
                index.leases.insert(name, owner);
            }
        }
        self.full = Some(index);
        self.pending.clear();
        self.needs_snapshot = true;
        self.changed = true;
        Ok(())
    }

    /// Every lease as the index knows it (may list a lease another writer released within the
    /// same clock tick; callers that act on an entry re-read its file).
    pub fn leases(&mut self) -> &Index {
        let (journal, pending) = (&self.journal, &self.pending);
        self.full.get_or_insert_with(|| {
            let mut idx = Index::default();
            index::replay(journal, &mut idx);
            index::replay(pending, &mut idx);
            idx
        })
    }

    /// Names the index attributes to (cid, ifname); candidates only, see [`Store::verify_held`].
    pub fn candidates(&self, cid: &str, ifname: &str, held: Held) -> Vec<String> {
        let matches = |o: &Owner| match held {
            Held::Exact => o.is_exactly(cid, ifname),
            Held::Legacy => o.is_legacy_of(cid),
            Held::Either => o.belongs_to(cid, ifname),
        };
        let mut out: Vec<String> = match &self.full {
            Some(full) => full
                .leases
                .iter()
                .filter(|(_, o)| matches(o))
                .map(|(n, _)| n.clone())
                .collect(),
            None => {
                let exact = format!("\tA\t{cid}\t{ifname}\n");
                let legacy = format!("\tL\t{cid}\n");
                let mut out = Vec::new();
                for data in [&self.journal, &self.pending] {
                    if held != Held::Legacy {
                        index::find_names(data, exact.as_bytes(), &mut out);
                    }
                    if held != Held::Exact {
                        index::find_names(data, legacy.as_bytes(), &mut out);
                    }
                }
                out
            }
        };
        out.sort();
        out.dedup();
        out
    }

    fn record(&mut self, name: &str, owner: Option<Owner>) {
        index::push_record(&mut self.pending, name, owner.as_ref());
        if let Some(full) = self.full.as_mut() {
            match owner {
                Some(o) => full.leases.insert(name.to_string(), o),
                None => full.leases.remove(name),
            };
        }
        self.changed = true;
    }

    /// Reads one lease file (the truth); None when it does not exist.
    pub fn read_owner(&self, name: &str) -> Result<Option<Owner>, IpamError> {
        match self.dir.read_entry(name) {
            Ok(EntryRead::Missing) => Ok(None),
            Ok(EntryRead::NotAFile) => Ok(Some(Owner::NotAFile)),
            Ok(EntryRead::File(content)) => Ok(Some(Owner::parse(&content))),
            Err(e) => Err(io_err("read lease", &self.dir.path().join(name), e)),
        }
    }

    pub fn last_reserved(&mut self, set_idx: usize) -> Option<IpAddr> {
        let content = self.hints().get(set_idx)?.as_deref()?;
        std::str::from_utf8(content).ok()?.trim().parse().ok()
    }

    /// Written in place like the reference does. Only a round-robin hint: a failure (e.g. a
    /// planted symlink, refused by O_NOFOLLOW) is reported on stderr and does not fail ADD.
    pub fn set_last_reserved(&mut self, set_idx: usize, ip: IpAddr) {
        let name = format!("{LAST_RESERVED_PREFIX}{set_idx}");
        // Overwrite then shrink instead of O_TRUNC: truncating to zero makes ext4 flush the
        // file synchronously on close (its replace-via-truncate heuristic), costing ms.
        let text = ip.to_string();
        let written = self
            .dir
            .open_file(
                &name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK,
                0o644,
            )
            .and_then(|f| {
                if !f.metadata()?.file_type().is_file() {
                    return Err(io::Error::other("not a regular file"));
                }
                f.write_all_at(text.as_bytes(), 0)?;
                f.set_len(text.len() as u64)
            });
        match (&written, self.hints.as_mut()) {
            (Ok(()), Some(hints)) if set_idx < hints.len() => {
                hints[set_idx] = Some(text.into_bytes());
            }
            // A failed or partial write leaves the file's content unknown: read it again.
            _ => self.hints = None,
        }
        if let Err(e) = written {
            eprintln!(
                "host-local: writing {}: {e}",
                self.dir.path().join(&name).display()
            );
        }
    }

    fn ensure_temp(&mut self, content: &str) -> Result<(), IpamError> {
        if self.temp_content.as_deref() == Some(content) {
            return Ok(());
        }
        let path = self.dir.path().join(TEMP_FILE);
        self.dir
            .remove(TEMP_FILE)
            .map_err(|e| io_err("remove", &path, e))?;
        self.temp_content = None;
        let mut f = self
            .dir
            .open_file(
                TEMP_FILE,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
            .map_err(|e| io_err("create", &path, e))?;
        // Every lease linked to this inode is of this boot.
        libcni::boot::stamp(&f);
        f.write_all(content.as_bytes())
            .map_err(|e| io_err("write", &path, e))?;
        self.temp_content = Some(content.to_string());
        Ok(())
    }

    /// Fallback for filesystems without hard links: exclusive create, then write.
    fn reserve_by_create(&mut self, name: &str, content: &str) -> Result<bool, IpamError> {
        let path = self.dir.path().join(name);
        let mut f =
            match self
                .dir
                .open_file(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(io_err("create lease", &path, e)),
            };
        libcni::boot::stamp(&f);
        let written = f.write_all(content.as_bytes());
        if let Err(e) = written {
            let _ = self.dir.remove(name);
            return Err(io_err("write lease", &path, e));
        }
        Ok(true)
    }

    /// Reserves `ip` for (cid, ifname) unless its lease file exists. An empty or garbage lease
    /// file (crash leftover) is reclaimed.
    pub fn try_reserve(&mut self, ip: IpAddr, cid: &str, ifname: &str) -> Result<bool, IpamError> {
        let name = ip.to_string();
        if self.taken_seen >= PROBES_BEFORE_FULL_MAP
            && self
                .leases()
                .leases
                .get(&name)
                .is_some_and(Owner::blocks_address)
        {
            return Ok(false);
        }
        let content = Owner::content(cid, ifname);
        self.ensure_temp(&content)?;
        for _attempt in 0..2 {
            let linked = match self.dir.link(TEMP_FILE, &name) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EPERM) | Some(libc::EOPNOTSUPP) | Some(libc::EMLINK)
                    ) =>
                {
                    self.reserve_by_create(&name, &content)?
                }
                Err(e) => return Err(io_err("reserve", &self.dir.path().join(&name), e)),
            };
            if linked {
                self.record(
                    &name,
                    Some(Owner::Attachment {
                        cid: cid.to_string(),
                        ifname: ifname.to_string(),
                    }),
                );
                return Ok(true);
            }
            match self.read_owner(&name)? {
                Some(Owner::Junk) => {
                    self.dir.remove(&name).map_err(|e| {
                        io_err("reclaim junk lease", &self.dir.path().join(&name), e)
                    })?;
                    self.changed = true;
                }
                Some(owner) => {
                    self.taken_seen += 1;
                    // Remember who holds it unless the loaded map already says so.
                    if self.full.as_ref().and_then(|f| f.leases.get(&name)) != Some(&owner) {
                        self.record(&name, Some(owner));
                    }
                    return Ok(false);
                }
                None => {}
            }
        }
        Ok(false)
    }

    /// Removes the lease `name` if its file still belongs to (cid, ifname) (or legacy cid).
    /// Returns whether a file was removed.
    pub fn release(&mut self, name: &str, cid: &str, ifname: &str) -> Result<bool, IpamError> {
        if self
            .read_owner(name)?
            .is_some_and(|o| o.belongs_to(cid, ifname))
        {
            self.dir
                .remove(name)
                .map_err(|e| io_err("release lease", &self.dir.path().join(name), e))?;
            self.record(name, None);
            return Ok(true);
        }
        Ok(false)
    }

    /// Keeps the names whose lease files really belong to (cid, ifname) (or legacy cid).
    pub fn verify_held(
        &self,
        names: Vec<String>,
        cid: &str,
        ifname: &str,
    ) -> Result<Vec<String>, IpamError> {
        let mut held = Vec::with_capacity(names.len());
        for name in names {
            if self
                .read_owner(&name)?
                .is_some_and(|o| o.belongs_to(cid, ifname))
            {
                held.push(name);
            }
        }
        Ok(held)
    }

    /// Frees the leases of earlier boots of the node, once per boot: the first call of a boot
    /// (`.ferrocni-boot` names another boot, or none) removes every lease file `boot`
    /// [predates](Boot::predates), then names `boot` in `.ferrocni-boot`; later calls read
    /// that small file and go on. Leases of this boot, ours or the reference's written since
    /// the boot began, are kept; non-files are never touched. Runs under the store lock, so
    /// no call of this boot can be reserving meanwhile. Housekeeping: what fails is reported
    /// on stderr (and retried by the next call), never failing the call. Returns the number
    /// of leases freed.
    pub fn forget_earlier_boots(&mut self, boot: &Boot) -> usize {
        let marker = format!("ferrocni-boot {}\n", boot.id());
        // The path of every call of the boot after its first: one small read. Anything but
        // the marker (a short read, a planted non-file) only means looking again.
        let mut buf = [0u8; 128];
        let read = self
            .dir
            .open_file(BOOT_FILE, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .and_then(|mut f| f.read(&mut buf));
        if read.is_ok_and(|n| buf[..n] == *marker.as_bytes()) {
            return 0;
        }
        let names = match self.dir.list() {
            Ok(names) => names,
            Err(e) => {
                eprintln!("host-local: listing {}: {e}", self.dir.path().display());
                return 0;
            }
        };
        let mut freed = 0;
        let mut complete = true;
        for name in names.into_iter().filter(|n| is_lease_name(n)) {
            let Ok(file) = self
                .dir
                .open_file(&name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            else {
                continue; // gone meanwhile, or a symlink: never a lease to free
            };
            if !file.metadata().is_ok_and(|m| m.file_type().is_file()) || !boot.predates(&file) {
                continue;
            }
            match self.dir.remove(&name) {
                Ok(()) => {
                    self.record(&name, None);
                    freed += 1;
                }
                Err(e) => {
                    complete = false;
                    eprintln!(
                        "host-local: freeing the lease of an earlier boot {}: {e}",
                        self.dir.path().join(&name).display()
                    );
                }
            }
        }
        if complete {
            self.write_boot_marker(&marker);
        }
        freed
    }

    /// Names the boot whose leases of earlier boots are freed. Rewritten in place, as the
    /// round-robin hints are; a torn write only makes the next call look again.
    fn write_boot_marker(&mut self, marker: &str) {
        let written = self
            .dir
            .open_file(
                BOOT_FILE,
                libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK,
                0o644,
            )
            .and_then(|f| {
                if !f.metadata()?.file_type().is_file() {
                    return Err(io::Error::other("not a regular file"));
                }
                f.write_all_at(marker.as_bytes(), 0)?;
                f.set_len(marker.len() as u64)
            });
        // A new file changes the directory: the journal's next marker must say so.
        self.changed = true;
        if let Err(e) = written {
            eprintln!(
                "host-local: writing {}: {e}",
                self.dir.path().join(BOOT_FILE).display()
            );
        }
    }

    /// Removes a lease file whatever it holds (GC of a verified victim); never non-files.
    pub fn remove_lease(&mut self, name: &str) -> Result<(), IpamError> {
        if matches!(self.read_owner(name)?, Some(Owner::NotAFile)) {
            return Ok(());
        }
        self.dir
            .remove(name)
            .map_err(|e| io_err("release lease", &self.dir.path().join(name), e))?;
        self.record(name, None);
        Ok(())
    }

    /// Ends the critical section: removes the temp file and, when the store changed, appends
    /// this call's records and a marker with the final fingerprint to the journal (or writes a
    /// fresh snapshot after a rescan or when the journal has grown too long). Index problems
    /// are reported on stderr only: the index is a cache and the next caller rebuilds it.
    pub fn commit(mut self) {
        if self.temp_content.take().is_some() {
            if let Err(e) = self.dir.remove(TEMP_FILE) {
                eprintln!(
                    "host-local: removing {}: {e}",
                    self.dir.path().join(TEMP_FILE).display()
                );
            }
        }
        if !self.changed || self.index_file.is_none() {
            return;
        }
        let grown = self.journal.len() + self.pending.len();
        let compact = self.needs_snapshot
            || !self.journal_valid
            || index::needs_compaction(grown, index::snapshot_len(&self.journal));
        let written = if compact {
            self.write_snapshot()
        } else {
            self.append_journal()
        };
        if let Err(e) = written {
            eprintln!(
                "host-local: writing {}: {e}",
                self.dir.path().join(INDEX_FILE).display()
            );
        }
    }

    fn append_journal(&mut self) -> io::Result<()> {
        // Before borrowing the file: the fingerprint may read the hints again.
        let fp = self.fingerprint().ok();
        let Some(file) = self.index_file.as_ref() else {
            return Ok(());
        };
        let mut content = std::mem::take(&mut self.journal);
        let offset = content.len() as u64;
        content.extend_from_slice(&self.pending);
        let mark = index::marker(&content, fp.as_ref());
        let mut tail = std::mem::take(&mut self.pending);
        tail.extend_from_slice(&mark);
        file.write_all_at(&tail, offset)
    }

    /// Writes the whole index to a side file and renames it into place (the rename is atomic,
    /// a crash leaves either journal), then closes it with a marker taken after the rename.
    fn write_snapshot(&mut self) -> io::Result<()> {
        let snapshot = index::snapshot(self.leases());
        let file = open_index(&self.dir, INDEX_NEW_FILE, libc::O_TRUNC)
            .ok_or_else(|| io::Error::other("cannot create"))?;
        file.write_all_at(&snapshot, 0)?;
        let (from, to) = (cstring(INDEX_NEW_FILE)?, cstring(INDEX_FILE)?);
        let fd = self.dir.raw_fd();
        // SAFETY: valid dirfd and NUL-terminated names; renameat never follows symlinks.
        if unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let fp = self.fingerprint().ok();
        file.write_all_at(
            &index::marker(&snapshot, fp.as_ref()),
            snapshot.len() as u64,
        )?;
        self.index_file = Some(file);
        Ok(())
    }
}

fn cstring(s: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(s)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// Opens (creating) an index file. Anything planted under its name (a symlink, a FIFO) is
/// removed once; if it still cannot be opened the store runs without a cache.
fn open_index(dir: &Dir, name: &str, extra_flags: libc::c_int) -> Option<std::fs::File> {
    let open = || {
        dir.open_file(
            name,
            libc::O_RDWR | libc::O_CREAT | libc::O_NONBLOCK | extra_flags,
            0o600,
        )
    };
    let regular = |f: std::fs::File| {
        f.metadata()
            .ok()
            .filter(|m| m.file_type().is_file())
            .map(|_| f)
    };
    if let Some(f) = open().ok().and_then(regular) {
        return Some(f);
    }
    let _ = dir.remove(name);
    let f = open().ok().and_then(regular);
    if f.is_none() {
        eprintln!(
            "host-local: cannot use index {}; rescanning",
            dir.path().join(name).display()
        );
    }
    f
}
