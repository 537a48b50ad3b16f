//! Blocks that must read as zero (`alloc_zeroed`, `calloc`): a never-used
//! slot (also one of a region the purge reset) is zero already and is not
//! written (its pages stay untouched, so a fresh 1 GiB `alloc_zeroed` does
//! not raise the resident set); a reused one is cleared: its resident pages
//! written, from [`CLEAR_BY_RELEASE`] on the others given back to the kernel
//! instead (they read as zero without being faulted in).

use core::ptr;

use crate::features::{self, Request};
use crate::layout::Slot;
use crate::{hot_path, sys};

/// From this size on, [`clear`] asks which pages are resident, and writes
/// only those.
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

/// Gives `[p, p + len)` back to the kernel so that it reads zero, as the
/// purge's never-used slots must. Where the kernel keeps some of it (pages
/// locked by `mlock` or `mlockall`, on which `MADV_DONTNEED` fails),
/// writes zeros over the pages that stayed resident instead. Returns
/// whether the pages went back.
///
/// # Safety
/// As [`sys::release`]: page-aligned, ours, and nobody needs its contents.
pub unsafe fn release_to_zero(p: *mut u8, len: usize) -> bool {
    // SAFETY: per the contract.
    if unsafe { sys::release(p, len) } {
        return true;
    }
    // The kernel stops at the first mapping it refuses: before it the pages
    // went back (not resident, zero), from it on they stayed.
    let read = sys::resident_runs(p.addr(), len, |start, run, resident| {
        if resident {
            // SAFETY: `[start, start + run)` lies in `[p, p + len)`.
            unsafe { ptr::write_bytes(sys::ptr_at::<u8>(start), 0, run) };
        }
    });
    if !read {
        // SAFETY: per the contract.
        unsafe { ptr::write_bytes(p, 0, len) };
    }
    false
}

/// Clears `p[..n]`, a reused slot (or a part of one). From
/// [`CLEAR_BY_RELEASE`] on, the whole pages are looked at first
/// (`mincore`): resident ones are written, the others given back to the
/// kernel (`MADV_DONTNEED`: they read as zero, and nothing is faulted in;
/// a page the purge gave back and nobody touched since is one). Writing a
/// resident page costs a tenth of giving it back and faulting it in again
/// (docs/decisions.md, "Clearing a reused slot").
///
/// # Safety
/// `p[..n]` is ours to write.
#[inline]
pub unsafe fn clear(p: *mut u8, n: usize) {
    if n >= CLEAR_BY_RELEASE && !cfg!(miri) {
        let (first, len) = sys::whole_pages(p.addr(), p.addr() + n);
        let head = first - p.addr();
        let read = sys::resident_runs(first, len, |start, run, resident| {
            let at = sys::ptr_at::<u8>(start);
            // SAFETY: `[start, start + run)` is page-aligned and lies in
            // `p[..n]`, which is ours; releasing private anonymous pages
            // only zeroes them.
            if resident || !unsafe { sys::release(at, run) } {
                // SAFETY: as above.
                unsafe { ptr::write_bytes(at, 0, run) };
            }
        });
        if read {
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
