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
//! A released slot's pages past the first are zero, but nothing records
//! it: a reused slot that must be zero is cleared ([`zeroed`](crate::zeroed)).

use crate::{layout, sys};

pub use crate::layout::RELEASE_SC;

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
    // The whole pages after the one holding the link.
    let (first, len) = sys::whole_pages(addr + 1, addr + layout::slot_size(sc));
    if len > 0 {
        // SAFETY: `[first, first + len)` lies inside the slot, which the
        // caller owns, past the link's page, and is page-aligned.
        unsafe { sys::release(sys::ptr_at(first), len) };
    }
}
