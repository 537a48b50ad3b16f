//! Giving the memory of free slots back to the operating system.
//!
//! Slots below [`RELEASE_SC`] (64 KiB) never cost a system call on free;
//! their memory stays resident for reuse (a thread that would touch new
//! memory first looks for freed slots on other slabs, see
//! `slots::alloc_new_memory`, so that memory is reused rather than piled up).
//!
//! A freed slot of at least [`RELEASE_SC`] either stays resident ("kept"),
//! if the *resident budget* allows, or gives every page but its first back
//! to the kernel (`MADV_DONTNEED`) before it is pushed: the first page
//! keeps the slot's link, the others read as zero when next touched and
//! cost a page fault each then. Slots of at least [`ALWAYS_RELEASE_SC`]
//! (64 MiB) are always released.
//!
//! The resident budget, for the whole process: the kept slots' bytes stay
//! within [`RESIDENT_BUDGET`] (128 MiB) or a quarter of the bytes of such
//! slots in use ([`BUDGET_DIVISOR`]), whichever is larger, as counted at
//! each free. A kept slot is marked so in its second word (its first holds
//! the link); whoever takes it from the list takes its bytes off the count.
//! So a program that frees and allocates large blocks in turn makes no
//! system call, while one that frees many keeps only the budget resident.
//! The budget is checked at free time only: kept slots stay kept until they
//! are reused, so after a phase that frees most of its large blocks up to
//! the budget of that moment stays resident (the lists are LIFO and
//! lock-free, so slots deep in them cannot be reached to release later).
//!
//! Measured on `bench/preload` mstress (blocks up to 4 MiB, 8 threads): a
//! 32 MiB budget made it 3x slower than keeping everything, from page
//! faults on reuse; at 128 MiB it is as fast as keeping everything, with
//! the same peak RSS.
//!
//! What is zero: a never-used slot is still known to be zero (the flh's
//! `used` flag says so). A released slot's pages past the first are zero
//! too, but no flag records it: zeroing a reused slot ([`clear`]) of at
//! least [`CLEAR_BY_RELEASE`] bytes releases its pages again (which costs
//! little for pages already released) instead of writing them.

use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// Freed slots of this size class and above (64 KiB) give their pages but
/// the first back to the kernel unless the resident budget keeps them.
/// (Under Miri, whose largest size class is 15, no slot is that large.)
pub const RELEASE_SC: u32 = 16;

/// Whether the slot at `addr` is of at least [`RELEASE_SC`]: as that is 16,
/// the top bit of the 5-bit size class field, one bit test says it.
#[inline(always)]
pub fn is_large(addr: usize) -> bool {
    const _: () = assert!(RELEASE_SC == 1 << (crate::layout::SC_BITS - 1));
    addr & (1 << (crate::layout::SC_SHIFT + crate::layout::SC_BITS - 1)) != 0
}

/// Whether a request of `size` bytes aligned to `align` (a power of two)
/// needs a slot of at least [`RELEASE_SC`] or a big mapping: the cheap
/// test front ends use to pick the hot path. True for size 0.
#[inline(always)]
pub const fn needs_large(size: usize, align: usize) -> bool {
    // size_class is the bit length of this OR (at least MIN_SC); it is below
    // RELEASE_SC exactly when the OR is below 2^(RELEASE_SC - 1).
    (size.wrapping_sub(1) | (align - 1)) >= (1 << (RELEASE_SC - 1))
}

/// Freed slots of this size class and above (4 MiB) always give their pages
/// but the first back.
pub const ALWAYS_RELEASE_SC: u32 = 26;

/// The resident budget's floor: bytes of free slots (of at least
/// [`RELEASE_SC`]) kept resident in any case.
pub const RESIDENT_BUDGET: usize = 128 << 20;

/// Above the floor, the budget is the bytes of slots of at least
/// [`RELEASE_SC`] in use divided by this.
pub const BUDGET_DIVISOR: usize = 4;

/// An allocation of at least [`RELEASE_SC`] whose own list holds no freed
/// slot takes a freed slot of up to this many size classes larger, if one
/// is there, before it touches a never-used slot.
pub const BORROW_UP: u32 = 2;

/// From this size on, [`clear`] releases whole pages instead of writing
/// them.
pub const CLEAR_BY_RELEASE: usize = 1 << 20;

/// Second word of a free slot (of at least [`RELEASE_SC`]) whose pages were
/// kept resident and counted in the budget.
const KEPT: u32 = 0x4b45_5054;
/// Second word of a free slot (of at least [`RELEASE_SC`]) whose pages past
/// the first were released.
const RELEASED: u32 = 0x5245_4c53;

/// Bytes of free slots (of at least [`RELEASE_SC`]) kept resident, in the
/// whole process.
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of slots of at least [`RELEASE_SC`] handed out and not freed.
static IN_USE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of free slots kept resident now (a snapshot, for diagnostics and
/// tests).
pub fn kept_bytes() -> usize {
    // Relaxed: a snapshot of a count.
    KEPT_BYTES.load(Ordering::Relaxed)
}

/// The marker word of the slot at `addr`.
#[inline]
fn marker(addr: usize) -> *mut u32 {
    sys::ptr_at(addr + 4)
}

/// The budget now: the floor, or the bytes in use over the divisor.
#[inline]
fn budget(in_use: usize) -> usize {
    RESIDENT_BUDGET.max(in_use / BUDGET_DIVISOR)
}

/// Called by free for the slot at `addr`, of size class `sc >= RELEASE_SC`,
/// before it is pushed: keeps it resident within the budget, else releases
/// its pages past the first; marks which.
///
/// # Safety
/// The caller owns the slot (it is being freed and is not yet pushed).
#[inline]
pub unsafe fn before_push(addr: usize, sc: u32) {
    debug_assert!(sc >= RELEASE_SC);
    let size = 1usize << sc;
    // Relaxed (all counts here): the slot's own marker, published by the
    // push, says whether it was counted; the counts synchronize nothing.
    let in_use = IN_USE_BYTES.fetch_sub(size, Ordering::Relaxed) - size;
    let mut kept = false;
    if sc < ALWAYS_RELEASE_SC {
        let before = KEPT_BYTES.fetch_add(size, Ordering::Relaxed);
        kept = before + size <= budget(in_use);
        if !kept {
            KEPT_BYTES.fetch_sub(size, Ordering::Relaxed);
        }
    }
    // SAFETY: the caller owns the slot.
    unsafe { mark(addr, sc, kept) };
}

/// Releases the pages past the first of the slot at `addr` (unless `kept`)
/// and writes its marker.
///
/// # Safety
/// The caller owns the slot, of size class `sc >= RELEASE_SC`.
unsafe fn mark(addr: usize, sc: u32, kept: bool) {
    let size = 1usize << sc;
    if !kept {
        let page = sys::page_size();
        if size > page {
            // SAFETY: `[addr + page, addr + size)` lies inside the slot, which
            // the caller owns, and is page-aligned (slots are naturally
            // aligned and larger than a page); the link's page stays.
            unsafe { sys::release(sys::ptr_at(addr + page), size - page) };
        }
    }
    // SAFETY: slots of at least RELEASE_SC are larger than 8 bytes; the
    // caller owns this one; the push publishes the write.
    unsafe { marker(addr).write(if kept { KEPT } else { RELEASED }) };
}

/// Called when the slot at `addr`, of size class `sc >= RELEASE_SC`, was
/// taken from its list: counts it in use and, if it was kept resident,
/// takes its bytes off the kept count.
///
/// # Safety
/// The caller just took the slot from its list (owns it); `fresh` says
/// whether it was never handed out before (else free marked it).
#[inline]
pub unsafe fn after_pop(addr: usize, sc: u32, fresh: bool) {
    debug_assert!(sc >= RELEASE_SC);
    // Relaxed: a count (see before_push).
    IN_USE_BYTES.fetch_add(1 << sc, Ordering::Relaxed);
    if fresh {
        return;
    }
    // SAFETY: the slot is ours; its marker was written before the push our
    // pop acquired.
    let m = unsafe { marker(addr).read() };
    debug_assert!(m == KEPT || m == RELEASED, "bad marker {m:#x}");
    if m == KEPT {
        // Relaxed: a count (see before_push).
        KEPT_BYTES.fetch_sub(1 << sc, Ordering::Relaxed);
    }
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
