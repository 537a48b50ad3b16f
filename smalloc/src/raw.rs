//! Pointer-only slot operations, for front ends that do not know the layout
//! on free (the C ABI in `smalloc-ffi`). `GlobalAlloc` users never need
//! these.
//!
//! Only slots are handled here: a request whose [`size_class`] exceeds
//! [`MAX_SC`](crate::layout::MAX_SC) must be served by the caller (for
//! example with its own mapping and header), and [`owns`] tells the two
//! apart on free.

pub use crate::layout::{
    MAX_SC, MAX_SLOT_SIZE, MIN_SC, grower_sc, moves_on_shrink, shrink_leaves_slot, size_class,
};

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

/// Whether a request of `size` bytes aligned to `align` (a power of two)
/// is served by [`alloc_small_slot`], the hot path: slots below 64 KiB.
/// False for size 0.
#[inline(always)]
pub const fn is_small(size: usize, align: usize) -> bool {
    !crate::layout::needs_large(size, align)
}

/// [`alloc_slot`] for a size class of a request that [`is_small`]: the
/// same result on the shortest path.
#[inline(always)]
pub fn alloc_small_slot(sc: u32) -> (*mut u8, bool) {
    slots::alloc_small(sc)
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

/// Clears `p[..n]` of a reused slot the way `alloc_zeroed` does: from 1 MiB
/// on by giving whole pages back to the kernel (they read as zero, and the
/// resident set drops), below by writing zeros.
///
/// # Safety
/// `p[..n]` is ours to write and `p` is the start of a slot.
#[inline]
pub unsafe fn clear(p: *mut u8, n: usize) {
    // SAFETY: per the contract (slots are naturally aligned).
    unsafe { crate::release::clear(p, n) }
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

/// Makes smalloc's reservation now if it does not exist yet (it is
/// otherwise made lazily by the first allocation). False if the operating
/// system refused it. A front end calls this from its load-time
/// constructor so that a `fork` cannot catch another thread halfway
/// through the lazy reservation.
pub fn reserve() -> bool {
    crate::region::init().is_some()
}

/// Base address of the reservation, or `None` before it exists. For
/// diagnostics.
pub fn region_base() -> Option<usize> {
    let base = crate::region::base_raw();
    crate::region::is_ready(base).then_some(base)
}

/// The current free-list head word of (slab, size class) (see
/// [`free_list`](crate::free_list) for its format), or 0 before the
/// reservation exists. For diagnostics: a list whose word is still 0 was
/// never used.
pub fn flh_word(slab: usize, sc: u32) -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    debug_assert!(slab < crate::layout::NUM_SLABS && (MIN_SC..=MAX_SC).contains(&sc));
    let Some(base) = region_base() else {
        return 0;
    };
    let addr = crate::layout::flh_addr(base, slab, sc);
    // SAFETY: flh addresses lie in the never-unmapped reservation, 8-byte
    // aligned, and every access to them is atomic.
    let flh = unsafe { &*crate::sys::ptr_at::<AtomicU64>(addr) };
    // Relaxed: a diagnostic snapshot; nothing is read through it.
    flh.load(Ordering::Relaxed)
}

/// Freed slots of this size and more (128 MiB) give their pages (but the
/// first) back to the kernel; smaller ones stay resident for reuse.
pub const RELEASE_SIZE: usize = 1 << crate::release::RELEASE_SC;

/// Moves the calling thread's allocations to `slab` (taken modulo the
/// number of slabs) from now on, as a failover would. For benchmarks and
/// tests that need several threads on one slab (the design's worst case);
/// a thread's home slab for occupancy stays the one it was given. Makes the
/// reservation if needed; false if the OS refuses it.
pub fn move_current_thread_to_slab(slab: usize) -> bool {
    let raw = crate::region::base_raw();
    let base = if crate::region::is_ready(raw) {
        raw
    } else {
        match crate::region::init() {
            Some(base) => base,
            None => return false,
        }
    };
    crate::thread_slab::current(base);
    crate::thread_slab::set(base, slab % crate::layout::NUM_SLABS);
    true
}
