//! The global allocator of musl builds: dlmalloc over anonymous mmap, keeping every page it
//! maps, behind a spin lock; blocks of [`LARGE`] bytes and more are mappings of their own,
//! grown with mremap.
//!
//! musl's malloc (mallocng) gives freed groups back to the kernel at once: the vxlan plugin's
//! 5,000-peer reconcile made thousands of mmap/munmap pairs (a handful with glibc's malloc) and
//! its no-change pass ran far slower (docs/benchmarks.md, "Earlier runs and what each change
//! weighed"). A plugin process lives for one CNI call, so
//! returning memory buys nothing (peak RSS is reached either way) and costs page faults on
//! every reuse. The lock is uncontended in practice (plugins are single-threaded but for
//! short helper threads): one atomic exchange instead of musl's pthread mutex. Large blocks
//! bypass the heap as in glibc: host-local's journal (2 MB at 60,000 leases) grows by mremap
//! without copying or faulting its pages in again.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use dlmalloc::{Allocator, Dlmalloc};

/// Size of each mapping the heap grows by.
const GROW_BY: usize = 256 * 1024;
/// Spins before yielding the CPU to a lock holder that was preempted.
const SPINS_BEFORE_YIELD: u32 = 64;
/// Blocks of this size and more get a mapping of their own (page-aligned, so any alignment
/// up to a page is met).
const LARGE: usize = 256 * 1024;
const PAGE: usize = 4096;

fn is_large(layout: &Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

fn map_pages(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping touches no existing memory.
    let addr = unsafe {
        libc::mmap(
            null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        null_mut()
    } else {
        addr.cast()
    }
}

/// Fresh anonymous pages; nothing is ever unmapped or remapped.
struct Pages;

// SAFETY: `alloc` returns either null or a new private mapping of exactly `size` bytes, zeroed
// by the kernel; every release request is declined, which dlmalloc supports.
unsafe impl Allocator for Pages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let addr = map_pages(size);
        if addr.is_null() {
            (null_mut(), 0, 0)
        } else {
            (addr, size, 0)
        }
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        null_mut()
    }

    fn free_part(&self, _ptr: *mut u8, _old: usize, _new: usize) -> bool {
        false
    }

    fn free(&self, _ptr: *mut u8, _size: usize) -> bool {
        false
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        false
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        4096
    }
}

pub struct KeepingAllocator {
    locked: AtomicBool,
    heap: UnsafeCell<Dlmalloc<Pages>>,
}

// SAFETY: `heap` is only reached through `with_heap`, which holds `locked`.
unsafe impl Sync for KeepingAllocator {}

impl KeepingAllocator {
    pub const fn new() -> KeepingAllocator {
        let mut heap = Dlmalloc::new_with_allocator(Pages);
        // Segments are never released, so never look for releasable ones.
        heap.set_max_release_check_rate(0);
        heap.set_granularity(GROW_BY);
        KeepingAllocator {
            locked: AtomicBool::new(false),
            heap: UnsafeCell::new(heap),
        }
    }

    fn with_heap<R>(&self, f: impl FnOnce(&mut Dlmalloc<Pages>) -> R) -> R {
        let mut spins = 0;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins % SPINS_BEFORE_YIELD == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the lock is held, so this is the only reference to the heap.
        let result = f(unsafe { &mut *self.heap.get() });
        self.locked.store(false, Ordering::Release);
        result
    }
}

// SAFETY: a block's size class (large or not) follows from its layout, which GlobalAlloc's
// callers pass back unchanged: large blocks are whole mappings (mmap/mremap/munmap), the others
// are forwarded with their contract to dlmalloc's matching call.
unsafe impl GlobalAlloc for KeepingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            return map_pages(layout.size());
        }
        self.with_heap(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            // Fresh anonymous pages are zero.
            return map_pages(layout.size());
        }
        self.with_heap(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(&layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map_pages`/mremap.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
            return;
        }
        self.with_heap(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc guarantees `new_size` with `layout.align()` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_large(&layout), is_large(&new_layout)) {
            (false, false) => self
                .with_heap(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) }),
            (true, true) => {
                // SAFETY: `ptr` is a whole mapping of `layout.size()` bytes; the kernel moves
                // its pages rather than copying them.
                let moved = unsafe {
                    libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE)
                };
                if moved == libc::MAP_FAILED {
                    null_mut()
                } else {
                    moved.cast()
                }
            }
            _ => {
                // Crossing the threshold: a new block of the other kind, then a copy.
                // SAFETY: both blocks are live and at least min(old, new) bytes long.
                unsafe {
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
        }
    }
}
