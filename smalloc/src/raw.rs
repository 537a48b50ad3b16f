//! Pointer-only slot operations, for front ends that do not know the layout
//! on free (the C ABI in `smalloc-ffi`). `GlobalAlloc` users never need
//! these.
//!
//! Only slots are handled here: a request whose [`size_class`] exceeds
//! [`MAX_SC`](crate::layout::MAX_SC) must be served by the caller (for
//! example with its own mapping and header), and [`owns`] tells the two
//! apart on free.

pub use crate::layout::{MAX_SC, MAX_SLOT_SIZE, MIN_SC, grower_sc, size_class};

use crate::slots;

/// Takes a slot of size class `sc` (`MIN_SC..=MAX_SC`), or of a larger one
/// if every slab of `sc` is empty. Null when no slot is left or the
/// reservation failed. The flag is true when the slot was never handed out
/// before, so its memory is still zero.
#[inline(always)]
pub fn alloc_slot(sc: u32) -> (*mut u8, bool) {
    debug_assert!((MIN_SC..=MAX_SC).contains(&sc));
    slots::alloc(sc)
}

/// Returns a slot to its free list.
///
/// # Safety
/// `p` was returned by [`alloc_slot`] (or smalloc's `GlobalAlloc` for a
/// layout that fits a slot) and is not used after this call.
#[inline(always)]
pub unsafe fn free_slot(p: *mut u8) {
    debug_assert!(owns(p));
    // SAFETY: per the contract.
    unsafe { slots::dealloc(p) }
}

/// Whether `p` lies inside smalloc's reservation (is a slot).
#[inline(always)]
pub fn owns(p: *const u8) -> bool {
    slots::contains(p)
}

/// Size of the slot containing `p` (`p` must satisfy [`owns`]).
#[inline(always)]
pub fn slot_size(p: *const u8) -> usize {
    slots::slot_size(p)
}

/// Start of the slot containing `p` (`p` must satisfy [`owns`]).
#[inline(always)]
pub fn slot_start(p: *const u8) -> *const u8 {
    let mask = slots::slot_size(p) - 1;
    p.wrapping_sub(p.addr() & mask)
}
