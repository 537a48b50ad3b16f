//! Giving the memory of free slots back to the operating system.
//!
//! A freed slot of at least [`RELEASE_SC`] (128 MiB: blocks of more than
//! 64 MiB) gives every page but its first back to the kernel
//! (`MADV_DONTNEED`) before it is pushed: the first page keeps the slot's
//! link, the others read as zero when next touched. Smaller slots never
//! cost a system call on free: their memory stays resident for reuse, and
//! is reused before new memory is touched (a thread whose own list offers
//! only never-used slots first takes freed slots from other slabs and, for
//! slots of 64 KiB and more, from slightly larger size classes; see
//! `cold_path::find_freed`). So the memory of freed slots below the
//! threshold is bounded by the most the program ever had freed at once of
//! each size class, much as glibc's heap keeps what it serves below its
//! (adaptive) mmap threshold of at most 32 MiB.
//!
//! Why 128 MiB, measured: docs/decisions.md ("Which freed slots give their
//! pages back").
//!
//! What is zero: a never-used slot is still known to be zero (the flh's
//! `used` flag says so). A released slot's pages past the first are zero
//! too, but no flag records it: zeroing a reused slot ([`clear`]) of at
//! least [`CLEAR_BY_RELEASE`] bytes releases its pages again (which costs
//! little for pages already released) instead of writing them.

use core::ptr;

use crate::sys;

/// Freed slots of this size class and above (128 MiB) give their pages but
/// the first back to the kernel.
pub const RELEASE_SC: u32 = 27;

/// From this size on, [`clear`] releases whole pages instead of writing
/// them.
pub const CLEAR_BY_RELEASE: usize = 1 << 20;

/// Called by free for the slot at `addr`, of size class `sc`, before it is
/// pushed: from [`RELEASE_SC`] on, releases its pages past the first.
///
/// # Safety
/// The caller owns the slot (it is being freed and is not yet pushed).
#[inline]
pub unsafe fn before_push(addr: usize, sc: u32) {
    if sc < RELEASE_SC {
        return;
    }
    let page = sys::page_size();
    let size = 1usize << sc;
    if size > page {
        // SAFETY: `[addr + page, addr + size)` lies inside the slot, which
        // the caller owns, and is page-aligned (slots are naturally aligned
        // and larger than a page); the link's page stays.
        unsafe { sys::release(sys::ptr_at(addr + page), size - page) };
    }
}

/// A slot of size class `sc` (or larger, on failover) whose first `size`
/// bytes are zero, for `alloc_zeroed` and `calloc`; null when none is left.
/// A never-used slot is not written (its pages stay untouched); a reused
/// one is cleared (`clear`).
#[inline]
pub fn alloc_zeroed_slot(sc: u32, size: usize) -> *mut u8 {
    debug_assert!(size <= 1 << sc);
    let (p, fresh) = crate::hot_path::alloc(sc, crate::hot_path::Request::new(size));
    if !fresh && !p.is_null() {
        // SAFETY: the slot holds at least `size` bytes and is naturally
        // aligned; nobody else has it.
        unsafe { clear(p, size) };
    }
    // Cleared by writes, by the kernel (released pages), or never written.
    #[cfg(feature = "valgrind")]
    crate::valgrind::defined(p, size);
    p
}

/// Clears `p[..n]`, a reused slot (or a part of one). Large blocks give their
/// whole pages back to the kernel, which makes them read as zero, instead
/// of writing them: that is faster, and lowers the resident set instead of
/// raising it; the partial last page is written.
///
/// # Safety
/// `p[..n]` is ours to write; `p` is page-aligned when `n >=
/// CLEAR_BY_RELEASE` (slots of at least a page are naturally aligned).
#[inline]
pub unsafe fn clear(p: *mut u8, n: usize) {
    if n >= CLEAR_BY_RELEASE && !cfg!(miri) {
        let whole = n & !(sys::page_size() - 1);
        // SAFETY: `p[..whole]` is ours, page-aligned; releasing private
        // anonymous pages only zeroes them.
        if unsafe { sys::release(p, whole) } {
            // SAFETY: the tail lies inside `p[..n]`.
            unsafe { ptr::write_bytes(p.add(whole), 0, n - whole) };
            return;
        }
    }
    // SAFETY: per the contract.
    unsafe { ptr::write_bytes(p, 0, n) };
}
