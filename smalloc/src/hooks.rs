//! Hooks for diagnostics, tests and benchmarks: reading the metadata of a
//! list, which slabs have owners, and pinning a thread to a slab. Not part
//! of the allocator's API; hidden from its documentation.

use crate::layout::{MAX_SC, MIN_SC};

/// Base address of the reservation, or `None` before it exists. For
/// diagnostics.
pub fn reservation_base() -> Option<usize> {
    let base = crate::geometry::base_raw();
    crate::geometry::is_ready(base).then_some(base)
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
    /// Freed slots on the shared list and on the owner's private list.
    pub free: u64,
}

/// The usage of (slab, size class), or all zeros before the reservation
/// exists or while the list was never used.
pub fn list_usage(slab: usize, sc: u32) -> ListUsage {
    debug_assert!(slab < crate::layout::NUM_SLABS && (MIN_SC..=MAX_SC).contains(&sc));
    let Some(base) = reservation_base() else {
        return ListUsage::default();
    };
    let addr = crate::layout::slab_addr(base, slab);
    let block = crate::metadata::private_block(addr);
    let l = crate::stats::read_list(addr, block, sc, &mut 0, None);
    ListUsage {
        handed_out: l.handed_out,
        shared_frees: l.shared_frees,
        free: l.free_shared + l.free_private,
    }
}

/// The slab the calling thread owns, if any: it allocates and frees that
/// slab's small slots on private lists. For diagnostics and tests.
pub fn owned_slab() -> Option<usize> {
    let owned = crate::home_slab::owned();
    crate::home_slab::is_owner(owned)
        .then(|| crate::layout::slab_of(crate::home_slab::owned_slab(owned)))
}

/// The slab the calling thread allocates from (its own, or the shared slab
/// of a thread without one), if it has allocated. For tests.
pub fn current_slab() -> Option<usize> {
    let current = crate::home_slab::current();
    (current != 0).then(|| crate::layout::slab_of(crate::home_slab::slab_addr(current)))
}

/// The slabs that have an owner, as a bit set. For diagnostics and tests.
pub fn owned_slabs() -> usize {
    !crate::ownership::unowned() & ((1 << crate::layout::THREAD_SLABS) - 1)
}

/// Bytes of freed large slots of one size class (at least one slot) that a
/// thread keeps for itself on its slab's private list before it frees them
/// where other threads can reuse them.
pub const PRIVATE_LARGE_BYTES: usize = crate::capped::PRIVATE_LARGE_BYTES;

/// Slots of other slabs of one small size class that an owner holds at
/// most (`held`).
pub const HELD_DEPTH: usize = crate::held::DEPTH;

/// Freed slots of this size and more (128 MiB) give their pages (but the
/// first) back to the kernel; smaller ones stay resident for reuse.
pub const RELEASE_SIZE: usize = crate::layout::slot_size(crate::layout::RELEASE_SC);

/// Moves the calling thread's allocations to `slab` (taken modulo the
/// number of slabs) from now on, without owning it: the thread gives up the
/// slab it owns, if any, and never owns one again, so it allocates and frees
/// through the shared lists (a failover may still move it). For benchmarks
/// and tests that need several threads on one slab (the design's worst
/// case). Makes the reservation if needed; false if the OS refuses it.
pub fn move_current_thread_to_slab(slab: usize) -> bool {
    let raw = crate::geometry::base_raw();
    let base = if crate::geometry::is_ready(raw) {
        raw
    } else {
        match crate::reservation::init() {
            Some(base) => base,
            None => return false,
        }
    };
    if crate::home_slab::current() == 0 {
        crate::home_slab::assign(base);
    }
    crate::home_slab::pin_unowned(base, slab % crate::layout::THREAD_SLABS);
    true
}
