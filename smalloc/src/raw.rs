//! Pointer-only slot operations, for front ends that do not know the layout
//! on free (the C ABI in `smalloc-ffi`). `GlobalAlloc` users never need
//! these.
//!
//! Only slots are handled here: a request whose [`size_class`] exceeds
//! [`largest_sc`] must be served by the caller (for example with its own
//! mapping and header), and [`owns`] tells the two apart on free.

pub use crate::grow::shrink_leaves_slot;
/// Size in bytes of the slots of a size class.
pub use crate::layout::slot_size as class_size;
pub use crate::layout::{LARGE_SC, MAX_SC, MIN_SC, Slot, size_class};

use crate::hot_path;

/// Mappings of big blocks (above the largest slot), for a front end that
/// keeps its own header below the block.
pub use crate::big::{Mapped, map_block, remap_block, shrink_block, unmap_block};
pub use crate::geometry::{largest_sc, slots_used_up};
pub use crate::sys::page_size;
pub use crate::zeroed::alloc_zeroed_slot;

/// Takes a slot of size class `sc` (`MIN_SC..=MAX_SC`), or of a larger one
/// if every slab of `sc` is empty, for a request of `size` bytes (what the
/// heap profiler counts and records); [`Slot::NONE`] when no slot is left
/// or the layout could not be made.
#[inline(always)]
pub fn alloc_slot(sc: u32, size: usize) -> Slot {
    debug_assert!((MIN_SC..=MAX_SC).contains(&sc));
    hot_path::alloc(sc, crate::features::Request::new(size))
}

/// [`size_class`] of a request aligned to at least 16 bytes (`align`, a
/// power of two), from the hot path's tables.
#[inline(always)]
pub fn size_class_16(size: usize, align: usize) -> u32 {
    crate::metadata::size_class_by_table::<true>(size, align)
}

/// As [`alloc_slot`]; the hot path ([`alloc_or`]) just found nothing for
/// a request of class `sc`, on this thread, so the cold path at once.
#[inline(always)]
pub fn alloc_slot_cold(sc: u32, size: usize) -> Slot {
    debug_assert!((MIN_SC..=MAX_SC).contains(&sc));
    let req = crate::features::Request::new(size);
    if sc >= LARGE_SC {
        crate::cold_path::alloc_large(sc, req)
    } else {
        crate::cold_path::alloc_small(sc, req)
    }
}

/// The hot path of allocation: for a request of `size` bytes aligned to
/// `align` (a power of two, at least 16: malloc's), a reused slot of its size class from the
/// calling thread's own slab, or else `cold(size, align)` — the request is
/// not small (below 64 KiB; size 0 is not), the thread owns no slab, or its
/// list is empty — where the front end finds one the longer way
/// ([`alloc_slot_cold`]) with its own rules and failure handling.
#[inline(always)]
pub fn alloc_or(size: usize, align: usize, cold: fn(usize, usize) -> *mut u8) -> *mut u8 {
    hot_path::alloc_request::<true>(size, align, crate::features::Request::new(size), cold)
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
    unsafe { hot_path::dealloc(p) }
}

/// The hot path of [`free_slot`] alone: frees `p` if it is a small slot of
/// the slab the calling thread owns, and says whether it did. Any other
/// pointer — null, foreign, big, or another slab's slot — is left alone.
///
/// # Safety
/// `p` is null, outside the reservation, or a live slot that the caller
/// gives up if this returns true.
#[inline(always)]
pub unsafe fn free_slot_hot(p: *mut u8) -> bool {
    // SAFETY: per the contract.
    unsafe { hot_path::free_owned(p) }
}

/// The rest of [`free_slot`] where [`free_slot_hot`] returned false for
/// `p`: the slot goes to the cold path without the hot path's test again.
///
/// # Safety
/// As [`free_slot`]; [`free_slot_hot`] just returned false for `p`, on this
/// thread.
#[inline(always)]
pub unsafe fn free_slot_cold(p: *mut u8) {
    debug_assert!(owns(p));
    // SAFETY: per the contract; not a slot the hot path takes.
    unsafe { crate::cold_path::dealloc(p) }
}

/// Whether `p` lies inside smalloc's reservation (is a slot).
#[inline(always)]
pub fn owns(p: *const u8) -> bool {
    hot_path::contains(p)
}

/// Size of the slot containing `p` (`p` must satisfy [`owns`]).
#[inline(always)]
pub fn slot_size(p: *const u8) -> usize {
    hot_path::slot_size(p)
}

/// Start of the slot containing `p` (`p` must satisfy [`owns`]).
#[inline(always)]
pub fn slot_start(p: *const u8) -> *const u8 {
    p.with_addr(crate::layout::slot_start(p.addr()))
}

/// Makes smalloc's reservation now if it does not exist yet (it is
/// otherwise made lazily by the first allocation). False if the operating
/// system refused it. A front end calls this from its load-time
/// constructor so that a `fork` cannot catch another thread halfway
/// through the lazy reservation.
pub fn reserve() -> bool {
    crate::reservation::init().is_some()
}
