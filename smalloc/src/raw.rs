//! Pointer-only slot operations, for front ends that do not know the layout
//! on free (the C ABI in `smalloc-ffi`). `GlobalAlloc` users never need
//! these.
//!
//! Only slots are handled here: a request whose [`size_class`] exceeds
//! [`MAX_SC`] must be served by the caller (for
//! example with its own mapping and header), and [`owns`] tells the two
//! apart on free.

pub use crate::layout::{
    MAX_SC, MAX_SLOT_SIZE, MIN_SC, grower_sc, moves_on_shrink, shrink_leaves_slot, size_class,
};

use core::sync::atomic::Ordering;

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

/// The hot path of allocation alone: for a request of `size` bytes aligned
/// to `align` (a power of two), a reused slot of its size class from the
/// calling thread's own slab, or `None` — the request is not small (below
/// 64 KiB; size 0 is not), the thread owns no slab, or its list is empty —
/// in which case [`alloc_slot`] finds one the longer way. Lets a front end
/// keep its own rules and its failure handling off the hot path.
#[inline(always)]
pub fn alloc_hot(size: usize, align: usize) -> Option<*mut u8> {
    slots::alloc_hot(crate::layout::private_index_of(size, align))
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
    unsafe { slots::free_owned(p) }
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

/// What the metadata of one (slab, size class) says, read without
/// stopping anyone. For diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListUsage {
    /// Slots ever handed out: claimed from the never-used tail, less the
    /// claimed slots still waiting in the owner's fresh run.
    pub handed_out: u64,
    /// Pushes onto the shared list (frees by threads that did not own the
    /// slab, and of large slots), modulo 2^32.
    pub shared_frees: u64,
}

/// The usage of (slab, size class), or all zeros before the reservation
/// exists or while the list was never used.
pub fn list_usage(slab: usize, sc: u32) -> ListUsage {
    debug_assert!(slab < crate::layout::NUM_SLABS && (MIN_SC..=MAX_SC).contains(&sc));
    let Some(base) = region_base() else {
        return ListUsage::default();
    };
    let addr = crate::layout::slab_addr(base, slab);
    // Relaxed: a diagnostic snapshot; nothing is read through it.
    let tail = u64::from(slots::tail(addr, sc).load(Ordering::Relaxed));
    let run = slots::fresh_run(crate::layout::private_block(addr), sc).load(Ordering::Relaxed);
    let waiting = (run >> 32).saturating_sub(run & 0xffff_ffff);
    ListUsage {
        handed_out: tail.saturating_sub(waiting),
        shared_frees: slots::flh(addr, sc).load(Ordering::Relaxed) >> 32,
    }
}

/// The slab the calling thread owns, if any: it allocates and frees that
/// slab's small slots on private lists. For diagnostics and tests.
pub fn owned_slab() -> Option<usize> {
    let owned = crate::thread_slab::owned();
    crate::thread_slab::is_owner(owned)
        .then(|| crate::layout::slab_of(crate::thread_slab::owned_slab(owned)))
}

/// The slabs that have an owner, as a bit set. For diagnostics and tests.
pub fn owned_slabs() -> usize {
    !crate::ownership::unowned() & ((1 << crate::layout::NUM_SLABS) - 1)
}

/// Bytes of freed large slots of one size class (at least one slot) that a
/// thread keeps for itself on its slab's private list before it frees them
/// where other threads can reuse them.
pub const PRIVATE_LARGE_BYTES: usize = crate::cold_path::PRIVATE_LARGE_BYTES;

/// Freed slots of this size and more (128 MiB) give their pages (but the
/// first) back to the kernel; smaller ones stay resident for reuse.
pub const RELEASE_SIZE: usize = 1 << crate::release::RELEASE_SC;

/// Moves the calling thread's allocations to `slab` (taken modulo the
/// number of slabs) from now on, without owning it: the thread gives up the
/// slab it owns, if any, and never owns one again, so it allocates and frees
/// through the shared lists (a failover may still move it). For benchmarks
/// and tests that need several threads on one slab (the design's worst
/// case). Makes the reservation if needed; false if the OS refuses it.
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
    if crate::thread_slab::current() == 0 {
        crate::thread_slab::assign(base);
    }
    crate::thread_slab::pin_unowned(base, slab % crate::layout::NUM_SLABS);
    true
}
