//! Blocks that must read as zero (`alloc_zeroed`, `calloc`): a never-used
//! slot is zero already and is not written (its pages stay untouched, so a
//! fresh 1 GiB `alloc_zeroed` does not raise the resident set); a reused one
//! is cleared, by writing it or, from [`CLEAR_BY_RELEASE`] on, by giving its
//! pages back to the kernel (`MADV_DONTNEED`: they read as zero when next
//! touched), which is faster and lowers the resident set instead of raising
//! it (pages already given back cost little to give back again).

use core::ptr;

use crate::features::{self, Request};
use crate::layout::Slot;
use crate::{hot_path, sys};

/// From this size on, [`clear`] releases whole pages instead of writing
/// them.
pub const CLEAR_BY_RELEASE: usize = 1 << 20;

/// A slot of size class `sc` (or larger, on failover) whose first `size`
/// bytes are zero, for `alloc_zeroed` and `calloc`; null when none is left.
/// A never-used slot is not written (its pages stay untouched); a reused
/// one is cleared (`clear`).
#[inline]
pub fn alloc_zeroed_slot(sc: u32, size: usize) -> *mut u8 {
    debug_assert!(size <= crate::layout::slot_size(sc));
    let Slot { ptr: p, fresh } = hot_path::alloc(sc, Request::new(size));
    if !fresh && !p.is_null() {
        // SAFETY: the slot holds at least `size` bytes; nobody else has it.
        unsafe { clear(p, size) };
    }
    // Cleared by writes, by the kernel (released pages), or never written.
    features::zeroed(p, size);
    p
}

/// Clears `p[..n]`, a reused slot (or a part of one). Large blocks give their
/// whole pages back to the kernel, which makes them read as zero, instead
/// of writing them: that is faster, and lowers the resident set instead of
/// raising it; the partial pages at either end are written.
///
/// # Safety
/// `p[..n]` is ours to write.
#[inline]
pub unsafe fn clear(p: *mut u8, n: usize) {
    if n >= CLEAR_BY_RELEASE && !cfg!(miri) {
        let (first, len) = sys::whole_pages(p.addr(), p.addr() + n);
        let head = first - p.addr();
        // SAFETY: `[first, first + len)` lies in `p[..n]`, which is ours,
        // and is page-aligned; releasing private anonymous pages only
        // zeroes them.
        if unsafe { sys::release(p.add(head), len) } {
            // SAFETY: both partial pages lie inside `p[..n]`.
            unsafe {
                ptr::write_bytes(p, 0, head);
                ptr::write_bytes(p.add(head + len), 0, n - head - len);
            }
            return;
        }
    }
    // SAFETY: per the contract.
    unsafe { ptr::write_bytes(p, 0, n) };
}
