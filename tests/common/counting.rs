//! A counting global allocator for memory tests and benches: live heap bytes, read before
//! and after building a structure, and their peak in between. A binary that uses it declares it itself (so the other
//! test binaries keep the system allocator):
//!
//! ```ignore
//! #[global_allocator]
//! static A: Counting = Counting;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Heap bytes allocated and not yet freed, through `Counting`.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The most `live()` has been since the last [`reset_peak`] (which returns `live()`).
// A bench that includes this file alone may read only `live()`.
#[allow(dead_code)]
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Start a new peak from the bytes live now, and return them.
#[allow(dead_code)]
pub fn reset_peak() -> isize {
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size() as isize);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        grew(new as isize - l.size() as isize);
        unsafe { System.realloc(p, l, new) }
    }
}
