//! A cache hint: ask for a line before it is read, so that a miss overlaps other work.

#[cfg(target_arch = "x86_64")]
pub(super) fn prefetch_line(p: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: SSE is part of every x86_64 target, and a prefetch is a hint that never
    // faults, whatever the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn prefetch_line(_: *const u8) {}
